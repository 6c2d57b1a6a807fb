"""An override of a key the config lacks suggests ``+KEY=VALUE`` only where the node takes new keys;
elsewhere it names the keys there, and for generate's ``data.*`` generate's own options."""

import pytest

from xdllm.cli.main import main


@pytest.mark.parametrize(("argv", "expected"), [
    (["generate", "ckpt=runs/x", "data.num_test_samples=8"],
     "unknown key 'data.num_test_samples' (did you mean num_samples?): data has no such key and takes no new "
     "ones; generate sets what it generates with its own options: num_samples= (how many samples)"),
    (["train", "--cfg", "optim.foo=1"],
     "unknown key 'optim.foo': optim has no such key and takes no new ones; known keys there: accumulate_grad_batches"),
    (["train", "--cfg", "trainer.detect_anomaly=true"],
     "unknown key 'trainer.detect_anomaly': trainer does not list it; known keys there: accelerator, devices, "
     "enable_model_summary, enable_progress_bar, log_every_n_steps, max_steps, max_time, precision, strategy, "
     "val_check_interval; "
     "trainer takes new keys: add one with +trainer.detect_anomaly=VALUE"),
])
def test_unknown_key_hint_names_a_fix_that_is_accepted(argv, expected, capsys):
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"xdllm: error: {expected}"), line
    assert "+KEY=VALUE" not in line


def test_a_component_that_takes_no_such_argument_is_named_instead_of_a_new_key(capsys):
    """``model`` takes new keys, but the arlm network takes no ``shift_outputs`` (a denoiser's
    option): adding it with ``+`` would only fail later, so the line says so now."""
    assert main(["train", "--cfg", "experiment=sort_arlm", "model.shift_outputs=true"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("xdllm: error: unknown key 'model.shift_outputs': model does not list it; known keys there: "
                    "attn_backend, compile, d_model, dropout, max_positions, n_heads, n_layers, norm, vocab_size; "
                    "xdllm_models.arlm.model.causal_rotary_transformer takes no argument 'shift_outputs'")


def test_a_predictor_that_passes_its_keywords_to_its_base_takes_only_the_bases_arguments(tmp_path, capsys):
    """``MDLMPredictor(*args, sampler=..., **kwargs)`` passes the rest to the engine: its
    arguments are its own and the engine's, so a typo is named as one (not offered as a new key,
    which would only fail later) and an unknown ``+`` key is listed against all of them."""
    assert main(["train", "--cfg", "experiment=sort_mdlm", "predictor.treshold=0.9"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("; xdllm_models.mdlm.predictor.MDLMPredictor takes no argument 'treshold'"), line
    assert main(["train", "experiment=sort_mdlm", "+predictor.no_such=1", f"run_dir={tmp_path / 'run'}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("xdllm: error: predictor.no_such: xdllm_models.mdlm.predictor.MDLMPredictor takes no "
                           "argument 'no_such'; it takes: sampler, remdm_schedule, remdm_eta, remdm_t_on, "
                           "remdm_t_off, remdm_alpha_on, max_steps, max_new_tokens, model, "), line
    assert not (tmp_path / "run").exists()
    assert main(["train", "--cfg", "experiment=sort_mdlm", "+predictor.no_such=1"]) == 2  # before printing
    assert "MDLMPredictor takes no argument 'no_such'" in capsys.readouterr().err


def test_the_suggested_new_key_is_accepted(capsys):
    assert main(["train", "--cfg", "+trainer.detect_anomaly=true"]) == 0
    assert "detect_anomaly: true" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "--cfg", "experiment=sort_mlm", "model.d_modle=64"],
     "unknown key 'model.d_modle' (did you mean model.d_model?): model does not list it; known keys there: "
     "attn_backend, compile, d_model, dropout, max_positions, n_heads, n_layers, norm, shift_outputs, vocab_size; "),
    (["train", "--cfg", "experiment=sort_mlm", "predictor.treshold=0.9"],
     "unknown key 'predictor.treshold' (did you mean predictor.threshold?): predictor does not list it; known keys "
     "there: confidence, dual_cache, entropy_budget, guidance, max_new_tokens, max_steps, prefix_cache, "
     "prefix_cache_refresh, remask, threshold; "),
    (["train", "--cfg", "seeed=3"], "unknown key 'seeed' (did you mean seed?): the config has no such key"),
    (["train", "--cfg", "+optim.lrr=3"], "unknown key 'optim.lrr' in '+optim.lrr=3' (did you mean optim.lr?): "),
    (["generate", "ckpt=runs/x", "num_sample=3"], "unknown key 'num_sample' (did you mean num_samples?): "),
])
def test_a_typo_is_answered_with_the_key_it_was_meant_to_be(argv, expected, capsys):
    """The keys the composed config holds at the node (a family's model and predictor options
    included) are offered, and the closest one named first."""
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"xdllm: error: {expected}"), line


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "--cfg", "experiment=sort_mlm", "lr=3e-4"], "unknown key 'lr' (did you mean optim.lr?): "),
    (["train", "--cfg", "experiment=sort_mlm", "max_steps=10"],
     "unknown key 'max_steps' (did you mean predictor.max_steps or trainer.max_steps?): "),
    (["train", "--cfg", "experiment=sort_mlm", "d_model=64"],  # the name elsewhere, not 'model' here
     "unknown key 'd_model' (did you mean model.d_model?): "),
    (["train", "--cfg", "experiment=sort_mlm", "length=12"],
     "unknown key 'length' (did you mean task.params.length?): "),
    (["train", "--cfg", "trainer.lr=1"], "unknown key 'trainer.lr' (did you mean optim.lr?): "),
    (["train", "--cfg", "max_step=10"],
     "unknown key 'max_step' (did you mean predictor.max_steps or trainer.max_steps?)"),
    (["generate", "ckpt=runs/x", "seed=1"], "unknown key 'seed' (did you mean predictor.seed?): "),
    (["generate", "ckpt=runs/x", "temperature=0.7"],
     "unknown key 'temperature' (did you mean predictor.temperature?): "),
    (["eval", "ckpt=runs/x", "threshold=0.9"], "unknown key 'threshold' (did you mean predictor.threshold?): "),
    # the whole key with a dot for an underscore or back (train's history.k is generate's history_k)
    (["generate", "ckpt=runs/x", "history=topk", "history.k=3"], "unknown key 'history.k' (did you mean history_k?): "),
    (["train", "--cfg", "history_k=3"], "unknown key 'history_k' (did you mean history.k?): "),
    (["train", "--cfg", "optim_lr=3e-4"], "unknown key 'optim_lr' (did you mean optim.lr?): "),
])
def test_a_key_given_at_the_wrong_level_is_answered_with_where_it_is(argv, expected, capsys):
    """An option given without its node (``lr`` for ``optim.lr``; generate's ``seed`` for the
    predictor's) names the keys of that name elsewhere in the config, nearest the top first."""
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"xdllm: error: {expected}"), line


def test_a_name_no_key_has_gets_no_suggestion(capsys):
    assert main(["train", "--cfg", "experiment=sort_mlm", "nothing_like_it=1"]) == 2
    assert capsys.readouterr().err.startswith("xdllm: error: unknown key 'nothing_like_it': the config has no such key")


def test_a_typo_in_a_generate_predictor_option_names_the_option_meant(trained_run, capsys):
    """generate takes any ``predictor.*`` key (merged over the run's predictor), so the predictor's
    signature answers the typo."""
    assert main(["generate", f"ckpt={trained_run}", "predictor.treshold=0.9"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("xdllm: error: predictor.treshold (did you mean predictor.threshold?): "), line


def test_another_familys_option_is_named_as_such_with_this_familys_own(capsys):
    """``data prepare`` suggests ``mlm.target_length=...`` for the default family; given with
    ``model=mdlm`` it names mdlm's own options, and the one meant is accepted."""
    assert main(["train", "--cfg", "model=mdlm", "mlm.target_length=7"]) == 2
    assert capsys.readouterr().err.strip() == (
        "xdllm: error: unknown key 'mlm.target_length': mlm.* are options of model family mlm, and this run's "
        "family is mdlm; its own are mdlm.*: corruption, block_size, eps, target_length, prompt_dropout, "
        "attention_annealing_steps (model=mlm chooses family mlm)")
    assert main(["train", "--cfg", "model=mdlm", "mdlm.target_length=7"]) == 0
