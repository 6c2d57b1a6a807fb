"""A globally normalised loss trains the same whatever the split of the global batch.

MDLM divides by the number of supervised tokens of the whole optimizer step. On variable-length
answers the micro-batches hold different token counts, so averaging per-micro-batch means would
give another loss and other gradients; the harness's global count makes one process with one
batch of 8, one process accumulating four micro-batches of 2, and two gloo processes
accumulating two micro-batches of 2 each identical: same loss, same gradient norm, same weights.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY_RUN

from xdllm.cli.main import main
from xdllm_models.mlm.loss import MLMLoss

TINY_WITHOUT_TASK = [o for o in TINY_RUN if not o.startswith(("experiment=", "task."))]
MDLM_VARLEN = [*TINY_WITHOUT_TASK, "model=mdlm", "task=varlen_sort", "task.params.max_length=6",
               "task.params.median_length=3", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
               "trainer.max_steps=3", "trainer.val_check_interval=3", "optim.warmup_steps=0"]


def _train(run_dir: Path, *overrides: str, base: tuple[str, ...] = tuple(MDLM_VARLEN)) -> None:
    """In this process, except under DDP, whose launcher starts the second process from the
    command line it was given."""
    command = ["train", *base, f"run_dir={run_dir}", *overrides]
    if "trainer_strategy=ddp" not in overrides:
        assert main(command) == 0
        return
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    result = subprocess.run([sys.executable, "-m", "xdllm.cli.main", *command],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


def _scalars(run_dir: Path, tag: str) -> list[float]:
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [event.value for event in sorted(accumulator.Scalars(tag), key=lambda e: e.step)]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_one_process_accumulation_and_two_processes_train_identically(tmp_path: Path):
    runs = {
        "one batch of 8": (tmp_path / "single", ["data.batch_size=8"]),
        "4 micro-batches of 2": (tmp_path / "accumulate", ["data.batch_size=2", "optim.accumulate_grad_batches=4"]),
        "2 processes x 2 micro-batches of 2": (tmp_path / "ddp", ["data.batch_size=2", "trainer_strategy=ddp",
                                                                  "optim.accumulate_grad_batches=2"]),
    }
    for run_dir, overrides in runs.values():
        _train(run_dir, *overrides)
    reference_dir = runs["one batch of 8"][0]
    reference_loss = _scalars(reference_dir, "train/loss")
    reference_norm = _scalars(reference_dir, "train/grad_norm")
    reference_weights = _weights(reference_dir)
    assert len(reference_loss) == 3 and len(set(reference_loss)) == 3
    for name, (run_dir, _) in runs.items():
        assert _scalars(run_dir, "train/loss") == pytest.approx(reference_loss, abs=1e-5), name
        assert _scalars(run_dir, "train/grad_norm") == pytest.approx(reference_norm, rel=1e-5), name
        for key, value in _weights(run_dir).items():
            torch.testing.assert_close(value, reference_weights[key], atol=1e-6, rtol=1e-5, msg=f"{name}: {key}")


@pytest.mark.parametrize("family, weighted, term", [("hybrid", "hybrid.alpha=0.5", "ar_loss"),
                                                    ("udlm", "udlm.encoder_weight=0.5", "encoder_loss")])
def test_a_globally_normalised_loss_logs_its_terms_as_shares_of_the_step(family, weighted, term, tmp_path: Path):
    """A two-term loss's ``*_loss`` entries are shares of the global loss (weights included):
    logged summed over micro-batches (they were divided by their number, halving them under
    accumulation), so they are the same whatever the split and add up to ``train/loss`` (UDLM's
    encoder term left its weight out), in training and in validation."""
    base = (*TINY_RUN, f"model={family}", weighted, "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
            "trainer.max_steps=2", "trainer.val_check_interval=2", "optim.warmup_steps=0")
    single, accumulate = tmp_path / "single", tmp_path / "accumulate"
    _train(single, "data.batch_size=8", base=base)
    _train(accumulate, "data.batch_size=4", "optim.accumulate_grad_batches=2", base=base)
    for run_dir in (single, accumulate):
        for split in ("train", "val"):
            terms = [t + d for t, d in zip(_scalars(run_dir, f"{split}/{term}"),
                                           _scalars(run_dir, f"{split}/diffusion_loss"))]
            assert terms == pytest.approx(_scalars(run_dir, f"{split}/loss"), rel=1e-5), (run_dir.name, split)
    for tag in ("train/loss", f"train/{term}", "train/diffusion_loss"):
        assert _scalars(accumulate, tag) == pytest.approx(_scalars(single, tag), rel=1e-4), tag


def test_the_mlm_loss_trains_the_same_as_one_batch_or_accumulated_micro_batches(tmp_path: Path):
    """MLM divides by the masked tokens of the whole optimizer step: each sample draws its own
    masking level, so micro-batches hold different counts, and averaging their means (as it
    did) trained on another loss."""
    mlm = (*TINY_WITHOUT_TASK, "task=varlen_sort", "task.params.max_length=6", "task.params.median_length=3",
           "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "trainer.max_steps=2",
           "trainer.val_check_interval=2", "optim.warmup_steps=0")
    single, accumulate = tmp_path / "single", tmp_path / "accumulate"
    _train(single, "data.batch_size=8", base=mlm)
    _train(accumulate, "data.batch_size=2", "optim.accumulate_grad_batches=4", base=mlm)
    assert _scalars(accumulate, "train/loss") == pytest.approx(_scalars(single, "train/loss"), abs=1e-5)
    assert _scalars(accumulate, "train/grad_norm") == pytest.approx(_scalars(single, "train/grad_norm"), rel=1e-5)
    reference = _weights(single)
    for key, value in _weights(accumulate).items():
        torch.testing.assert_close(value, reference[key], atol=1e-6, rtol=1e-5, msg=key)


class LocalMLMLoss(MLMLoss):
    """MLM's loss with a ``__call__`` that takes no context, as a user's subclass might: it
    normalises each micro-batch by its own count, so it must be averaged like any local loss."""

    def __call__(self, model, batch):
        return super().__call__(model, batch)


def test_a_subclass_that_drops_the_context_is_averaged_as_a_local_loss(tmp_path: Path):
    tiny = [*TINY_WITHOUT_TASK, "task=varlen_sort", "task.params.max_length=6", "model.d_model=32",
            "model.n_layers=1", "model.n_heads=2", "trainer.max_steps=1", "trainer.val_check_interval=1",
            "data.batch_size=4", "optim.accumulate_grad_batches=2"]
    global_dir, local_dir = tmp_path / "global", tmp_path / "local"
    assert main(["train", *tiny, f"run_dir={global_dir}"]) == 0
    assert main(["train", *tiny, "loss._target_=test_global_denominator.LocalMLMLoss", f"run_dir={local_dir}"]) == 0
    (global_loss,), (local_loss,) = _scalars(global_dir, "train/loss"), _scalars(local_dir, "train/loss")
    assert local_loss == pytest.approx(global_loss, abs=0.1)  # a mean of two means, not their sum
