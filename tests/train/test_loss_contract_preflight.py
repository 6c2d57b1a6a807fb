"""A family loss that does not return what the training step reads (``loss``, scalar tensors) is
refused before the run writes anything, in one line naming the loss class and what it returned."""

import uuid

import pytest
from model_package_factory import write_model_package
from tiny_run import TINY_RUN

from xdllm.cli.main import main

BAD_LOSSES = '''
from xdllm_models.mlm.loss import MLMLoss


class TotalLoss(MLMLoss):
    def __call__(self, model, batch):
        out = super().__call__(model, batch)
        return {"total": out["loss"], "masked_tokens": out["masked_tokens"]}


class RowLoss(MLMLoss):
    def __call__(self, model, batch):
        out = super().__call__(model, batch)
        return {**out, "per_row": batch["input_ids"].float().mean(-1)}
'''


@pytest.mark.parametrize(("loss", "expected"), [
    ("TotalLoss", "the loss TotalLoss returned the keys total, masked_tokens, without 'loss': a loss must return "
                  "a dict with 'loss' (a floating-point scalar tensor"),
    ("RowLoss", "the loss RowLoss returned per_row, which are not scalar tensors"),
])
def test_a_loss_breaking_the_contract_is_refused_before_the_run(loss, expected, tmp_path, capsys):
    package = f"xdllm_test_lossfam_{uuid.uuid4().hex[:8]}"
    root = write_model_package(tmp_path / "models", package, "lossfam")
    (root / package / "bad_losses.py").write_text(BAD_LOSSES)
    run_dir = tmp_path / "run"
    code = main(["train", *TINY_RUN, "model=lossfam", f"model_search_path=[{root}]",
                 f"loss._target_={package}.bad_losses.{loss}", "trainer.max_steps=2", f"run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("xdllm: error: ") and expected in line
    assert not run_dir.exists()
