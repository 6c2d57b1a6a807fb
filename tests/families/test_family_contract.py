"""Every discovered model family passes the same checks, so a new family is tested the day it
is registered: a few training steps from the CLI, generation with history and TensorBoard
views, a checkpoint round trip, and predictions and a validation loss that do not depend on
the batch size, whatever the decoding options, and exact resume.

A family's model config must accept ``model.d_model``, ``model.n_layers`` and ``model.n_heads``
(the tests shrink the network with them) and train on the built-in ``varlen_sort`` task (answers
of 2 to 6 digits, so that batches differ in their token counts). A family that
needs frozen models (``ModelFamily.frozen_models``, e.g. a drafter's target) gets a tiny trained
run of each named family, shrunk the same way.
"""

import functools
import json
import random
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY_RUN

import xdllm
from xdllm.cli.main import main
from xdllm.config.components import refuses_argument
from xdllm.errors import XdllmError
from xdllm.history import iter_samples
from xdllm.registry import discover_families
from xdllm.run import generation_check
from xdllm.run.checkpoint import load_trained

REGISTERED = discover_families()
FAMILIES = sorted(REGISTERED)
TINY_FAMILY = [*(o for o in TINY_RUN if not o.startswith(("experiment=", "task."))), "task=varlen_sort",
               "task.params.median_length=4", "task.params.min_length=2", "task.params.max_length=6",
               "model.d_model=32", "model.n_layers=1", "model.n_heads=2"]


def frozen_runs(family: str, root: Path) -> list[str]:
    """``frozen.<name>=<run>`` for each frozen model the family needs, each a tiny run of the
    family it names, trained here."""
    overrides = []
    for name, needed in REGISTERED[family].family.frozen_models.items():
        run_dir = root / f"frozen-{name}"
        assert main(["train", *TINY_FAMILY, f"model={needed}", "trainer.max_steps=4",
                     "trainer.val_check_interval=4", f"run_dir={run_dir}"]) == 0
        overrides.append(f"++frozen.{name}={run_dir}")
    return overrides


@pytest.fixture(scope="module", params=FAMILIES)
def trained(request, tmp_path_factory) -> tuple[str, Path]:
    family = request.param
    root = tmp_path_factory.mktemp(f"family-{family}")
    run_dir = root / "run"
    code = main(["train", *TINY_FAMILY, f"model={family}", *frozen_runs(family, root), "trainer.max_steps=4",
                 "trainer.val_check_interval=4", "history.num_samples=2", f"run_dir={run_dir}"])
    assert code == 0
    return family, run_dir


def test_family_trains_and_logs_validation(trained):
    family, run_dir = trained
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert f"model_family: {family}" in (run_dir / "config.yaml").read_text()
    assert list((run_dir / "history").glob("val-step*/history-*.pt"))
    assert list((run_dir / "tensorboard").glob("events.*"))


def test_family_generates_with_history_and_views(trained, capsys):
    _, run_dir = trained
    output = run_dir.parent / "generated"
    assert main(["generate", f"ckpt={run_dir}", "num_samples=6", "history=topk", f"output_dir={output}"]) == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (output / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == summary["num_samples"] == 6
    assert 0.0 <= summary["exact_match"] <= 1.0 and all("target" in r for r in records)
    assert list((output / "tensorboard").rglob("events.*"))
    recorded = {sample.sample_id: sample for sample in iter_samples(output / "history")}
    assert sorted(recorded) == [record["sample_index"] for record in records]
    for record in records:  # the history tells the story of the predictions written
        sample = recorded[record["sample_index"]]
        assert sample.output_ids[:len(record["ids"])].tolist() == record["ids"]
        last_commit = [max((int(step) for step, done in zip(sample.steps, column) if done), default=-1)
                       for column in sample.committed.T]
        assert sample.commit_step.tolist() == last_commit


def test_family_checkpoint_round_trip(trained):
    _, run_dir = trained
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, weights_only=False)["state_dict"]
    run = load_trained(checkpoint)
    loaded = run.model.state_dict()
    assert set(loaded) == {key.removeprefix("model.") for key in saved if key.startswith("model.")}
    for key, value in loaded.items():
        assert torch.equal(value, saved[f"model.{key}"]), key
    assert not run.model.training


def test_family_predictions_do_not_depend_on_the_batch_size(trained, capsys):
    _, run_dir = trained
    texts = []
    for batch_size in (16, 5):
        output = run_dir.parent / f"batch{batch_size}"
        assert main(["generate", f"ckpt={run_dir}", "num_samples=16", f"batch_size={batch_size}",
                     f"output_dir={output}"]) == 0
        capsys.readouterr()
        lines = (output / "predictions.jsonl").read_text().splitlines()
        texts.append([(r["sample_index"], r["text"], r["steps_taken"]) for r in map(json.loads, lines)])
    assert texts[0] == texts[1]


def test_family_completes_prompts_from_python_as_generate_does(trained, tmp_path, capsys):
    _, run_dir = trained
    prompts = ["3 1 2", "9 0 4 4 1", "5 5", "8 1 1 0 7 2"]
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text("\n".join(prompts) + "\n")
    assert main(["generate", f"ckpt={run_dir}", f"prompts_file={prompts_file}", "batch_size=3",
                 f"output_dir={tmp_path / 'generated'}"]) == 0
    capsys.readouterr()
    lines = (tmp_path / "generated" / "predictions.jsonl").read_text().splitlines()
    kept = ("sample_index", "prompt", "text", "ids", "steps_taken")
    written = [{key: record[key] for key in kept} for record in map(json.loads, lines)]
    completed = [{key: record[key] for key in kept} for record in xdllm.complete(run_dir, prompts, batch_size=3)]
    assert completed == written


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_under_cpu_mixed_precision_with_a_weight_average(family, tmp_path):
    """``trainer.precision=bf16-mixed`` on the CPU: validation (generation with history) runs
    under Lightning's CPU autocast too. ``optim.ema_decay``: the checkpoint averages every
    trainable weight, and a loaded run gets the averages."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY_FAMILY, f"model={family}", *frozen_runs(family, tmp_path), "trainer.max_steps=2",
                 "trainer.val_check_interval=2", "history.num_samples=2", "trainer.precision=bf16-mixed",
                 "optim.ema_decay=0.5", f"run_dir={run_dir}"]) == 0
    (history_file,) = (run_dir / "history" / "val-step0000002").glob("history-*.pt")
    assert torch.load(history_file, weights_only=False)["topk_probs"].dtype == torch.float16
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    average = checkpoint["xdllm_weight_average"]
    run = load_trained(run_dir / "checkpoints" / "last.ckpt")
    trainable = {name for name, p in run.model.named_parameters(remove_duplicate=False) if p.requires_grad}
    assert average["updates"] == 2 and set(average["weights"]) == trainable
    state = run.model.state_dict()
    assert all(torch.equal(state[name], value) for name, value in average["weights"].items())


def _logged_losses(run_dir: Path) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {event.step: event.value for event in events.Scalars(tag)} for tag in ("train/loss", "val/loss")}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_resumes_the_loss_curve_of_an_uninterrupted_run(family, tmp_path):
    """``resume=<step checkpoint>`` continues the very curve the uninterrupted run drew: the
    weights, the optimizer, the weight average, the data order and the family's corruption
    draws all come back (docs/training.md "Exact resume")."""
    common = [*TINY_FAMILY, f"model={family}", *frozen_runs(family, tmp_path), "trainer.max_steps=6",
              "trainer.val_check_interval=3", "checkpoint.save_every_n_steps=3", "optim.ema_decay=0.5"]
    assert main(["train", *common, f"run_dir={tmp_path / 'full'}"]) == 0
    assert main(["train", *common, f"run_dir={tmp_path / 'resumed'}",
                 f"resume={tmp_path / 'full' / 'checkpoints' / 'step0000003.ckpt'}"]) == 0
    uninterrupted, resumed = _logged_losses(tmp_path / "full"), _logged_losses(tmp_path / "resumed")
    assert sorted(resumed["train/loss"]) == [4, 5, 6] and sorted(resumed["val/loss"]) == [6]
    for tag, curve in resumed.items():
        for step, loss in curve.items():
            assert loss == pytest.approx(uninterrupted[tag][step], abs=1e-6), (tag, step)
    assert len({round(loss, 6) for loss in resumed["train/loss"].values()}) == 3  # the curve moves


def test_family_validation_loss_does_not_depend_on_the_batch_split(trained, capsys):
    """``val/loss`` (and every other metric of the loss pass) is a mean over the split, the same
    whether its 16 samples are one batch or batches of 5, 5, 5 and 1."""
    _, run_dir = trained
    summaries = []
    for batch_size in (16, 5):
        assert main(["eval", f"ckpt={run_dir}", "split=validation", "num_samples=16",
                     f"batch_size={batch_size}"]) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    assert summaries[1]["loss"] == pytest.approx(summaries[0]["loss"], rel=1e-5)


def test_family_never_generates_padding_or_bos(trained, monkeypatch, capsys):
    """Every LM head (the frozen models' too) favours the padding and BOS tokens by far; no
    answer holds them (training never targets them), so generation still never writes them."""
    _, run_dir = trained
    loaded = load_trained(run_dir)
    favoured = sorted({loaded.tokenizer.pad_token_id, loaded.tokenizer.bos_token_id})

    def favour(module, inputs, logits):
        return logits + torch.zeros(logits.shape[-1], dtype=logits.dtype).index_fill(0, torch.tensor(favoured), 1e4)

    def load_favouring(*args, **kwargs):
        run = load_trained(*args, **kwargs)
        for network in (run.model, *run.frozen.values()):
            for name, module in network.named_modules():
                if name.endswith("lm_head"):
                    module.register_forward_hook(favour)
        return run

    monkeypatch.setattr("xdllm.run.generate.load_trained", load_favouring)
    for temperature in (0.0, 1.0):
        output = run_dir.parent / f"favoured-{temperature}"
        assert main(["generate", f"ckpt={run_dir}", "num_samples=6", f"predictor.temperature={temperature}",
                     f"output_dir={output}"]) == 0
        capsys.readouterr()
        for record in map(json.loads, (output / "predictions.jsonl").read_text().splitlines()):
            ids = record["ids"]
            answer = ids[:ids.index(loaded.tokenizer.eos_token_id) + 1] if loaded.tokenizer.eos_token_id in ids else ids
            assert not set(answer) & set(favoured), (temperature, record)


DECODING_VALUES = {  # drawn for each option the family's predictor takes (its classes' __init__ arguments)
    "max_steps": [2, 4, 6], "temperature": [0.0, 0.8], "top_k": [None, 3], "top_p": [None, 0.9],
    "confidence": ["top_prob", "prob_diff", "entropy", None], "threshold": [None, 0.3, 0.8],
    "block_size": [2, 3], "steps_per_block": [1, 2], "stop_at_eos": [True, False], "remask": [True, False],
    "entropy_budget": [None, 1.0], "sampler": ["confidence", "ancestral", "remdm"], "guidance": [0.0, 1.0],
    "prefix_cache": [True, False], "dual_cache": [True, False], "use_cache": [True, False],
    "drafter_cache": [True, False], "speculative": [True, False], "stop_when_unchanged": [True, False],
    "entropy_bound": [None, 1.0], "seed": [0, 1],
}


def _decoding_options(predictor_target: str, rng: random.Random) -> dict:
    """A random setting of about half the options the predictor class ``predictor_target`` takes
    (those the config check accepts for it)."""
    return {name: rng.choice(values) for name, values in DECODING_VALUES.items()
            if not refuses_argument(predictor_target, name) and rng.random() < 0.5}


def test_family_decodes_a_row_alone_as_in_a_batch_whatever_its_options(trained):
    """Random settings of the family's decoding options: every row decodes the same tokens in
    the same steps alone as in a batch of rows of other lengths (float64 weights, so no kernel's
    last bits flip a near-tie; docs/predictor.md "Randomness and invariance")."""
    family, run_dir = trained
    run = load_trained(run_dir)
    for network in (run.model, *run.frozen.values()):
        network.double()
    prompts = ["3 1 2", "9 0 4 4 1", "5 5", "8 1 1 0 7 2"]
    rng, decoded = random.Random(family), 0
    for _ in range(40):
        options = _decoding_options(run.config.predictor._target_, rng)
        try:
            together = xdllm.complete(run, prompts, predictor=options, batch_size=len(prompts))
        except XdllmError:  # a combination the family refuses
            continue
        alone = xdllm.complete(run, prompts, predictor=options, batch_size=1)
        assert [(r["ids"], r["steps_taken"]) for r in alone] == [(r["ids"], r["steps_taken"]) for r in together], \
            options
        decoded += 1
        if decoded == 6:
            break
    assert decoded == 6


def test_family_decodes_the_same_whether_it_records_history_or_not(trained, tmp_path):
    """Recording the denoising history (top-k, canvases, commits) only watches: under random
    settings of the family's options every row decodes the same tokens in the same steps."""
    family, run_dir = trained
    run = load_trained(run_dir)
    prompts = ["3 1 2", "9 0 4 4 1", "5 5"]
    rng, decoded = random.Random(f"{family}-history"), 0
    for attempt in range(40):
        options = _decoding_options(run.config.predictor._target_, rng)
        try:
            plain = xdllm.complete(run, prompts, predictor=options, batch_size=2)
        except XdllmError:  # a combination the family refuses
            continue
        recorded = xdllm.complete(run, prompts, predictor=options, batch_size=2, history_dir=tmp_path / str(attempt))
        assert [(r["ids"], r["steps_taken"]) for r in plain] == [(r["ids"], r["steps_taken"]) for r in recorded], \
            options
        assert list((tmp_path / str(attempt)).glob("history-*.pt"))
        decoded += 1
        if decoded == 3:
            break
    assert decoded == 3


def _stopping_at_batch(monkeypatch, batches: list[int | None]) -> None:
    """The generation's predictor raises KeyboardInterrupt at its ``batches[0]``-th batch (None:
    never), as Ctrl-C would; its signature is kept (a drafter's ``frozen`` parameter)."""
    build = generation_check._build_predictor

    def stopping(run, options):
        predictor, calls = build(run, options), [0]
        predict = predictor.predict

        @functools.wraps(predict)
        def counted(*args, **kwargs):
            calls[0] += 1
            if calls[0] == batches[0]:
                raise KeyboardInterrupt
            return predict(*args, **kwargs)

        predictor.predict = counted
        return predictor

    monkeypatch.setattr(generation_check, "_build_predictor", stopping)


def test_family_generation_stopped_and_resumed_writes_what_an_uninterrupted_one_does(trained, monkeypatch, capsys):
    """Ctrl-C during the second of three batches, then ``resume=``: the same predictions as a
    generation that ran through, sampling included (every draw is keyed by the sample)."""
    _, run_dir = trained
    common = [f"ckpt={run_dir}", "num_samples=12", "batch_size=4", "predictor.temperature=1.0"]
    batches: list[int | None] = [None]
    _stopping_at_batch(monkeypatch, batches)
    through, stopped = run_dir.parent / "through", run_dir.parent / "stopped"
    assert main(["generate", *common, f"output_dir={through}"]) == 0
    batches[0] = 2
    assert main(["generate", *common, f"output_dir={stopped}"]) == 130
    batches[0] = None
    assert main(["generate", f"resume={stopped}"]) == 0
    capsys.readouterr()

    def written(folder: Path) -> list[tuple]:
        records = map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())
        return [(r["sample_index"], r["ids"], r["steps_taken"]) for r in records]

    assert len(written(through)) == 12 and written(stopped) == written(through)
