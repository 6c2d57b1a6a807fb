"""What the overrides given with ``resume=`` do.

- ``optim.*``: the checkpoint's optimizer and schedule carry the saving run's learning rate,
  weight decay, betas and eps, which the resumed run's settings replace (its moments are kept).
- ``trainer.max_steps`` is the step a run ends at: a resume from a checkpoint past it is refused
  (nothing would train), one at it says nothing is left to train and runs what follows training.
- ``seed``, ``data.num_val_samples``, ``data.num_test_samples``: the run's weights were kept out
  of the held-out samples its seed and counts drew; a resume drawing others is refused, a run
  started from its weights (``init_from``) on the same task is warned.
- what validation measures (the task, the predictor, ...): changed, ``best.ckpt`` is chosen afresh
  (the old one kept as ``best-before-step<S>.ckpt``).
"""

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.data.builtin_tasks import AdditionTask
from xdllm.data.tasks import draw_sample, held_out_draws, sample_keys
from xdllm.run.validation_change import measure_changes
from xdllm.train.optim_config import OptimConfig, lr_multiplier


@pytest.fixture
def run(tmp_path, capsys) -> Path:
    """A tiny run trained to step 4."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    return run_dir


def _learning_rates(run_dir: Path) -> dict[int, float]:
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars("lr-AdamW/pg1")}


@pytest.mark.slow
def test_resumed_run_trains_with_its_own_optimizer_settings(run, capsys):
    assert main(["train", f"resume={run}", "trainer.max_steps=8", "optim.lr=0.004", "optim.weight_decay=0.2",
                 "optim.beta2=0.95"]) == 0
    assert ("resume: optim.lr 0.001 -> 0.004, optim.weight_decay 0.01 -> 0.2, optim.beta2 0.98 -> 0.95"
            in capsys.readouterr().err)

    config = OptimConfig(lr=0.004, warmup_steps=2)
    rates = _learning_rates(run)
    for step in range(5, 9):  # the rate logged at step n is the one optimizer step n - 1 used
        assert rates[step] == pytest.approx(config.lr * lr_multiplier(step - 1, config, 8), rel=1e-6), step
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    decay_group, no_decay_group = saved["optimizer_states"][0]["param_groups"]
    assert (decay_group["weight_decay"], no_decay_group["weight_decay"]) == (0.2, 0.0)
    assert decay_group["betas"] == (0.9, 0.95)
    assert saved["lr_schedulers"][0]["base_lrs"] == [0.004, 0.004]


@pytest.mark.slow
def test_resume_given_more_steps_follows_the_longer_schedule_from_its_first_step(run, capsys):
    """The restored rate of step 5 was the 4-step schedule's last (lr * min_lr_ratio)."""
    assert main(["train", f"resume={run}", "trainer.max_steps=6"]) == 0
    assert "resume: optim" not in capsys.readouterr().err
    config = OptimConfig(warmup_steps=2)
    rates = _learning_rates(run)
    for step in (5, 6):
        assert rates[step] == pytest.approx(config.lr * lr_multiplier(step - 1, config, 6), rel=1e-6), step


@pytest.mark.slow
def test_resume_past_or_at_max_steps_says_so(run, capsys):
    assert main(["train", f"resume={run}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert ("last.ckpt is at step 4, past trainer.max_steps=2, the step the run ends at (not a number of steps "
            "more): nothing would train; give trainer.max_steps above 4 to train on") in error
    assert not (run / "generate").exists()

    assert main(["train", f"resume={run}", "generate_after_train=true"]) == 0
    error = capsys.readouterr().err
    assert ("nothing is left to train: the checkpoint is at trainer.max_steps=4 (give trainer.max_steps above it "
            "to train on)") in error
    assert "never validates" not in error  # it warned of what the steps it does not train would not do
    assert len(list((run / "generate").glob("*/predictions.jsonl"))) == 1  # what follows training ran


def test_another_seed_holds_out_samples_a_run_trained_on():
    """Why the next tests refuse: on the 3-digit addition task, 200 steps of 64 samples drawn with
    seed 0 trained on 11 of the 512 test samples seed 1 holds out (none of seed 0's)."""
    task = AdditionTask(num_digits=3)
    kept_out = sample_keys(held_out_draws(task, "validation", 0, 256) + held_out_draws(task, "test", 0, 512))
    trained = sample_keys([draw_sample(task, "train", index, 0, kept_out) for index in range(64 * 200)])
    assert len(sample_keys(held_out_draws(task, "test", 1, 512)) & trained) == 11
    assert not sample_keys(held_out_draws(task, "test", 0, 512)) & trained


@pytest.mark.slow
@pytest.mark.parametrize(("override", "said"), [
    ("seed=1", "seed=1 draws other validation and test samples than seed=0, which it trained with"),
    ("data.num_test_samples=20", "data.num_test_samples=20 holds out test samples 16 to 19, past the 16 it kept out "
                                 "of training"),
])
def test_a_resume_drawing_other_held_out_samples_is_refused(run, capsys, override, said):
    assert main(["train", f"resume={run}", "trainer.max_steps=6", override]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"xdllm: error: resume: {said} ({run}/checkpoints/last.ckpt, step 4)" in error
    assert error.rstrip().endswith("the run's validation and test figures would count samples it may have trained "
                                   "on; resume with seed=0, data.num_val_samples at most 16, data.num_test_samples "
                                   "at most 16, or start a new run")
    assert main(["train", f"resume={run}", "trainer.max_steps=5", "data.num_test_samples=8"]) == 0  # a subset


@pytest.mark.slow
def test_a_run_started_from_weights_of_another_seed_is_warned(run, tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=1", f"init_from={run}", "seed=1",
                 f"run_dir={tmp_path / 'seed1'}"]) == 0
    assert (f"init_from={run}/checkpoints/last.ckpt trained on this task: seed=1 draws other validation and test "
            "samples than seed=0, which it trained with; this run's validation and test figures may count samples "
            "its weights trained on (with seed=0") in " ".join(capsys.readouterr().err.split())
    assert main(["train", *TINY, "trainer.max_steps=1", f"init_from={run}", "task.params.length=5", "seed=1",
                 f"run_dir={tmp_path / 'other_task'}"]) == 0
    assert "trained on this task" not in capsys.readouterr().err  # another task's samples


@pytest.mark.slow
def test_a_resume_validating_another_task_chooses_best_afresh(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", f"run_dir={run}"]) == 0
    assert main(["train", f"resume={run}", "trainer.max_steps=6"]) == 0  # the same measure: best.ckpt goes on
    assert "validation measures something else" not in capsys.readouterr().err

    assert main(["train", f"resume={run}", "trainer.max_steps=8", "task.params.length=5"]) == 0
    kept = run / "checkpoints" / "best-before-step6.ckpt"
    assert ("resume: validation measures something else from step 6 on (task.params.length 4 -> 5, "
            "predictor.max_new_tokens 5 -> 6, predictor.max_steps 5 -> 6): best.ckpt, chosen by the old measure, is "
            f"kept as {kept}, and best.ckpt is chosen afresh from this run's validations") in capsys.readouterr().err
    best = torch.load(run / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=False)
    assert (best["global_step"], best["xdllm_config"]["task"]["params"]["length"]) == (8, 5)
    old = torch.load(kept, map_location="cpu", weights_only=False)
    assert old["xdllm_config"]["task"]["params"]["length"] == 4


def test_what_validation_measures_differently():
    recorded = {"task": {"name": "text_file", "params": {"path": "/a/c.txt", "max_tokens": 16}}, "seed": 0,
                "predictor": {"threshold": None}, "checkpoint": {"monitor": "val/loss", "mode": "min"}}
    moved = {**recorded, "task": {"name": "text_file", "params": {"path": "/b/c.txt", "max_tokens": 16}}}
    assert measure_changes(recorded, moved) == []  # moved data is compared by its digest
    newer = {**recorded, "predictor": {"threshold": None, "dual_cache": False}}
    assert measure_changes(recorded, newer) == []  # an option added since, off: as before
    assert measure_changes(recorded, moved, other_data=True) == ["the task's data"]
    changed = {**moved, "predictor": {"threshold": 0.9}, "checkpoint": {"monitor": "val/nll", "mode": "min"},
               "validation_choices": "/q.jsonl"}
    assert measure_changes(recorded, changed) == ["predictor.threshold None -> 0.9",
                                                  "checkpoint.monitor val/loss -> val/nll",
                                                  "validation_choices None -> /q.jsonl"]
