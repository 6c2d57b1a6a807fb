"""Every bad input is one ``xdllm: error:`` line naming what was wrong, exit status 2, and
nothing written: a table of bad values for each class of input."""

from pathlib import Path

import pytest
from tiny_run import TINY

from xdllm.cli.main import main

TRAIN = [
    ("trainer.max_steps=0", "trainer.max_steps=0 is not allowed: trainer.max_steps must be a whole number >= 1"),
    ("trainer.max_steps=three", "trainer.max_steps='three' is not allowed"),
    ("+frozen.target=123", "frozen.target=123 is not allowed: frozen.target must be a string (a run directory or "
                           "checkpoint); Hydra read the value as a number: for a string, quote it as typed, e.g. "
                           "frozen.target='123'"),
    ("init_from=123", "init_from=123 is not allowed: init_from must be a string (or null); Hydra read the value "
                      "as a number: for a string, quote it as typed, e.g. init_from='123'"),
    ("init_from=nowhere", "init_from: checkpoint not found: /"),
    ("judge=nowhere", "judge=/"),  # made absolute, then not found: refused before anything trains
    ("judge=123", "judge=123 is not allowed: judge must be a string (or null)"),
    ("init_from=''", "init_from= is empty: give the run directory or checkpoint to start from"),
    ("-m", "-m (sweep) needs at least one swept option, e.g. optim.lr=1e-3,3e-4 seed=0,1"),
    ("-m model.n_heads=4,3", "model.n_heads=3: could not build model"),  # refused before the first run trains
    ("-m run_dir=a,b", "run_dir cannot be swept"),
    ("-m trainer_strategy=ddp seed=0,1", "-m trains the sweep's runs one after another in this process, but "
                                         "trainer.strategy=ddp with trainer.devices=2 trains in several"),
    ("data.batch_size=-3", "data.batch_size must be a whole number >= 1"),
    ("data.eval_batch_size=0", "data.eval_batch_size must be a whole number >= 1"),
    ("data.num_val_samples=0", "data.num_val_samples must be a whole number >= 1"),
    ("optim.lr=0", "optim.lr must be a number > 0"),
    ("optim.lr=-1e-3", "optim.lr must be a number > 0"),
    ("optim.warmup_steps=-5", "optim.warmup_steps must be a whole number >= 0"),
    ("optim.accumulate_grad_batches=0", "optim.accumulate_grad_batches must be a whole number >= 1"),
    ("torch_threads=0", "torch_threads must be a whole number >= 1 (or null)"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval must be a whole number >= 1"),
    ("history.num_samples=-1", "history.num_samples must be a whole number >= 0"),
    ("checkpoint.mode=best", "checkpoint.mode must be max or min"),
    ("existing_run_dir=overwrite", "existing_run_dir must be refuse or move_aside"),
    ("trainer.accelerator=gpu", "trainer.accelerator=gpu but this machine has no CUDA device"),
    ("+foo=1", "unknown key 'foo' in '+foo=1': the config has no such key"),
    ("+data.batch_sise=3", "data has no such key and takes no new ones; known keys there: batch_size"),
    ("+trainer.gradient_clip_val=1", "set optim.gradient_clip_val instead"),
    ("model.n_layers=two", "model.n_layers='two' is not allowed: model.n_layers must be a whole number"),
    ("+model.nlayers=3", "model.nlayers (did you mean model.n_layers?): xdllm_models.mlm.model."
                         "RotaryTransformerMLMModel takes no argument"),
    ("+model.flash=1", "model.flash: xdllm_models.mlm.model.RotaryTransformerMLMModel takes no argument"),
    ("model.max_positions=8", "model.max_positions=8 is too small for task sort"),
    ("model.vocab_size=5", "model.vocab_size=5 is smaller than the tokenizer's vocabulary"),
    ("model.n_heads=3", "d_model=128 is not divisible by n_heads=3"),
    ("model.shift_outputs=yes", "model.shift_outputs='yes' is not allowed: model.shift_outputs must be true or false"),
    ("model=mdlm mdlm.attention_annealing_steps=abc", "mdlm.attention_annealing_steps='abc' is not allowed: it sets "
     "collator.train.attention_annealing_steps, which must be a whole number"),  # named as typed, not as the node
    ("model=mdlm mdlm.attention_annealing_steps=-3", "attention_annealing_steps must be a whole number >= 0, got -3"),
    ("predictor.confidence=maximal", "confidence must be one of"),
    ("mlm.prompt_dropout=1", "could not build collator.train (xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator): "
                             "MLMSeq2SeqTrainCollator: prompt_dropout must be in [0, 1), got 1"),
    ("mlm.target_length=2", "collator.train: MLMSeq2SeqTrainCollator: sample 0 has a target of 8 tokens; "
                            "target_length=2 leaves no room for its EOS"),
    ("model=mdlm mdlm.corruption=gauss", "corruption must be 'uniform' or 'blockwise', got 'gauss'"),
    ("data.validation_roles=[loss,lost]", "data.validation_roles=['loss', 'lost'] is not allowed"),
    ("experiment=nope", "unknown experiment 'nope'"),
    ("tokenizer=experiments/data/stories_tokenizer.json", "cannot encode the symbol"),
    ("tokenizer={broken}", "is not a readable tokenizers JSON file"),
    ("run_dir={file}/run", "Not a directory"),
    ("model=mlm collator=packed_bd3lm", "collator.train.target_length refers to a key this config does not have "
                                        "(Interpolation key 'bd3lm.target_length' not found); the model family is mlm"),
    ("model=arlm collator.train._target_=xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator",
     "the loss ARLMLoss looks for 'loss_mask' in the batches of collator.train (MLMSeq2SeqTrainCollator)"),
    ("checkpoint.monitor=loss", "checkpoint.monitor='loss' is not a validation metric"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps=0 is not allowed"),
    ("text_samples_temperature=-1", "text_samples_temperature must be a number >= 0 (or null)"),
    ("task.params.length=1 data.num_val_samples=16", "covers nearly the whole task space: use fewer held-out "
                                                     "samples (data.num_val_samples, data.num_test_samples)"),
]

GENERATE = [
    ("batch_size=0", "batch_size must be a whole number >= 1"),
    ("num_samples=0", "num_samples must be a whole number >= 1 (or null)"),
    ("split=train", "split must be test or validation"),
    ("history=all", "history must be topk (or null)"),
    ("predictor.max_new_tokens=100000", "plus predictor.max_new_tokens=100000 needs 100005 positions; the model "
                                        "has max_positions=512"),
    ("prompts_file={latin1}", "latin1.txt:1: not UTF-8 text (byte 0xe9 at byte offset 3 of the file)"),
    ("prompts_file={missing}", "prompts_file not found"),
    ("prompts_file={folder}", "/folder is a folder: give the file itself"),
    ("prompts_file={not_json}", "not_json.jsonl:1: not valid JSON (Extra data at column 3); a .jsonl prompts_file "
                                "holds a JSON object per line ({\"prompt\": ...}), a file of another name a plain "
                                "prompt per line"),
    ("prompts_file={no_prompt}", "no_prompt.jsonl:1: a .jsonl prompts_file holds one JSON object per line with a "
                                 "string 'prompt' (and a string 'response' to score against), got {\"text\": \"1 2\"}"),
    ("prompts_file={some_responses}", "some_responses.jsonl:2: no 'response', where "),
    ("prompts_file={long_response}", "long_response.jsonl:1: the response is 7 tokens with its EOS, more than the 5 "
                                     "the predictor generates (predictor.max_new_tokens=5): give "
                                     "predictor.max_new_tokens=7 or more"),
    ("predictor.temperature=-1", "temperature"),
    ("predictor.remask=yes", "predictor.remask='yes' is not allowed: predictor.remask must be true or false"),
    ("predictor.prefix_cache=1",
     "predictor.prefix_cache=1 is not allowed: predictor.prefix_cache must be true or false"),
    ("predictor.prefix_cache_refresh=2", "prefix_cache_refresh must be >= 1 and needs prefix_cache=true, got "
                                         "prefix_cache_refresh=2 with prefix_cache=False"),
    ("predictor.guidance=-1", "guidance must be >= 0 (0: no guidance), got -1"),
    ("predictor.entropy_budget=-1", "entropy_budget must be >= 0 (nats) or null, got -1"),
    ("predictor.prefix_cache=true predictor.dual_cache=true",
     "dual_cache keeps the columns after the current block: it needs prefix_cache=true and a block_size, got "
     "prefix_cache=True, block_size=None"),
    ("data_path=", "data_path= is empty: give the folder or file the run's data is in now"),
    ("data_path=123", "data_path=123 is not allowed: data_path must be a string (or null); Hydra read the value as "
                      "a number: for a string, quote it as typed, e.g. data_path='123'"),
    ("frozen=abc", "frozen='abc' is not allowed: frozen maps names to run directories or checkpoints, one per name: "
                   "frozen.NAME=<path> (+frozen.NAME=<path> for a name it has not)"),
    ("+frozen.target=true", "frozen.target=True is not allowed: frozen.target must be a string (a run directory or "
                            "checkpoint); Hydra read the value as true/false: for a string, quote it as typed, e.g. "
                            "frozen.target='true'"),
    ("+frozen.target=[a,b]", "frozen.target=['a', 'b'] is not allowed: frozen.target must be a string"),
    ("+frozen.target={file}", ": the run has no frozen model 'target' (it has: none)"),
    ("judge=123", "judge=123 is not allowed: judge must be a string (or null)"),
    ("judge=", "judge= is empty: give the run directory or checkpoint of an arlm run, or leave judge out"),
    ("judge={missing}", "missing.txt: checkpoint not found: "),
    ("judge={file}", "/file: could not read checkpoint "),
]


def _fill(argument: str, tmp_path: Path) -> str:
    (tmp_path / "broken.json").write_text('{"model": ')
    (tmp_path / "file").write_text("x")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 1 2\n".encode("latin-1"))
    (tmp_path / "folder").mkdir(exist_ok=True)
    jsonl = {"not_json": "1 2 3\n", "no_prompt": '{"text": "1 2"}\n',
             "some_responses": '{"prompt": "1 2", "response": "1 2"}\n{"prompt": "2 1"}\n',
             "long_response": '{"prompt": "1 2", "response": "1 2 3 4 5 6"}\n'}
    for name, text in jsonl.items():
        (tmp_path / f"{name}.jsonl").write_text(text)
    return argument.format(broken=tmp_path / "broken.json", file=tmp_path / "file",
                           latin1=tmp_path / "latin1.txt", missing=tmp_path / "missing.txt", folder=tmp_path / "folder",
                           **{name: tmp_path / f"{name}.jsonl" for name in jsonl})


def _one_line_error(code: int, capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("xdllm: error:") and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("arguments,expected", TRAIN, ids=[case[0] for case in TRAIN])
def test_bad_training_input_is_one_line_and_writes_nothing(arguments, expected, tmp_path, capsys):
    run_dir = tmp_path / "run"
    extra = [] if "run_dir=" in arguments else [f"run_dir={run_dir}"]
    extra += [] if "max_steps" in arguments else ["trainer.max_steps=1"]
    code = main(["train", *_fill(arguments, tmp_path).split(), *extra])
    assert expected in _one_line_error(code, capsys)
    assert not run_dir.exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:

    run_dir = tmp_path_factory.mktemp("bad_inputs") / "run"
    assert main(["train", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", f"run_dir={run_dir}"]) == 0
    return run_dir


@pytest.mark.parametrize("arguments,expected", GENERATE, ids=[case[0] for case in GENERATE])
def test_bad_generation_input_is_one_line_and_writes_nothing(arguments, expected, trained, tmp_path, capsys):
    before = sorted(trained.rglob("*"))
    code = main(["generate", f"ckpt={trained}", *_fill(arguments, tmp_path).split()])
    assert expected in _one_line_error(code, capsys)
    assert sorted(trained.rglob("*")) == before


def test_a_monitored_metric_the_run_does_not_log_is_one_line_at_the_first_validation(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "data.num_val_samples=8",
                 "checkpoint.monitor=val/nope", f"run_dir={run_dir}"])
    err = capsys.readouterr().err.strip()  # the progress lines, then one error line
    assert code == 2 and "Traceback" not in err, err
    error = err.splitlines()[-1]
    assert "checkpoint.monitor=val/nope is not a metric this run logs at validation; it logs: val/exact_match, " \
           "val/loss, val/token_accuracy" in error
    assert f'"checkpoint.monitor=<one of them>" resume={run_dir}' in error
