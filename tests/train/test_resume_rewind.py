"""A resume from a checkpoint before the run's newest (a rewind) trains the later steps again as
another branch: what the earlier branch left past that step is moved aside, so the run's
``best.ckpt``, ``resume=<run>`` and history views are the new branch's."""

from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.checkpoint import checkpoint_step, resume_point
from xdllm.train.best_checkpoint import NewestOnTieCheckpoint


@pytest.mark.slow
def test_a_rewound_resume_moves_the_abandoned_steps_aside(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=6", "trainer.val_check_interval=2",
                 "checkpoint.save_every_n_steps=2", "history.num_samples=2", f"run_dir={run}"]) == 0
    capsys.readouterr()

    assert main(["train", f"resume={run}/checkpoints/step0000002.ckpt", "trainer.max_steps=4",
                 "optim.lr=0.0005"]) == 0
    error = capsys.readouterr().err
    [aside] = tmp_path.glob("run.abandoned-after-step2-*")
    assert (f"is at step 2, before the run's newest checkpoint: the steps after it are trained again, as another "
            f"branch; what the run held past step 2 is moved to {aside}: best.ckpt (step 6), last.ckpt (step 6), "
            "step0000004.ckpt, step0000006.ckpt, the denoising history of 2 validations (steps 4 to 6); best.ckpt "
            "is chosen afresh from this run's validations") in " ".join(error.split())

    def steps(folder: Path) -> dict[str, int]:
        return {file.name: checkpoint_step(file) for file in (folder / "checkpoints").glob("*.ckpt")}

    assert steps(run) == {"step0000002.ckpt": 2, "step0000004.ckpt": 4, "best.ckpt": 4, "last.ckpt": 4}
    assert steps(aside) == {"step0000004.ckpt": 4, "step0000006.ckpt": 6, "best.ckpt": 6, "last.ckpt": 6}
    assert sorted(p.name for p in (run / "history").iterdir()) == ["val-step0000002", "val-step0000004"]
    assert sorted(p.name for p in (aside / "history").iterdir()) == ["val-step0000004", "val-step0000006"]
    assert sorted(p.name for p in (aside / "tensorboard").iterdir()) == ["history-step0000004",
                                                                         "history-step0000006"]
    assert "lr: 0.0005" in (run / "config.yaml").read_text()
    assert "lr: 0.0005" not in (aside / "config.yaml").read_text()  # the abandoned branch's own record
    abandoned_log = (aside / "train.log").read_text()  # its log up to the rewind, which the run's log says
    assert "step 6/6" in abandoned_log and "optim.lr=0.0005" not in abandoned_log
    assert f"is moved to {aside}" in " ".join((run / "train.log").read_text().split())
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["optimizer_states"][0]["param_groups"][0]["initial_lr"] == 0.0005  # the new branch's

    point = resume_point(run)  # the run continues the new branch, not the abandoned one
    assert (point.checkpoint.name, point.global_step) == ("last.ckpt", 4)
    assert resume_point(aside).global_step == 6  # which can be continued as a run of its own


@pytest.mark.slow
def test_a_resume_from_the_newest_checkpoint_moves_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "checkpoint.save_every_n_steps=1", f"run_dir={run}"]) == 0
    assert main(["train", f"resume={run}", "trainer.max_steps=3"]) == 0
    assert "abandoned" not in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


@pytest.mark.parametrize("kept", [True, False])
def test_a_restored_best_state_whose_file_is_gone_is_forgotten(tmp_path, kept):
    best = tmp_path / "best.ckpt"
    if kept:
        best.write_bytes(b"")
    state = {"dirpath": str(tmp_path), "best_model_score": torch.tensor(0.9), "best_model_path": str(best),
             "kth_best_model_path": str(best), "kth_value": torch.tensor(0.9),
             "best_k_models": {str(best): torch.tensor(0.9)}, "last_model_path": ""}
    checkpoint = NewestOnTieCheckpoint(dirpath=tmp_path, filename="best", monitor="val/x", mode="max", save_top_k=1)
    checkpoint.load_state_dict(state)
    if kept:
        assert (checkpoint.best_model_score, checkpoint.best_model_path) == (torch.tensor(0.9), str(best))
    else:  # the next validation writes best.ckpt, whatever its score
        assert (checkpoint.best_model_score, checkpoint.best_model_path, checkpoint.best_k_models) == (None, "", {})
        assert checkpoint.kth_value == -torch.inf
