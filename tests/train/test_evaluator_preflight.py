"""What the evaluator cannot score on the val collator's batches fails before training, not at
the first validation."""

from tiny_run import TINY

from xdllm.cli.main import main
from xdllm_models.mlm.loss import MLMLoss


class LossWithoutCount(MLMLoss):
    """MLM's loss without its masked-token count, as a user's own loss might return."""

    def __call__(self, model, batch):
        return {"loss": super().__call__(model, batch)["loss"]}


def test_a_loss_without_the_evaluators_weight_entry_is_refused_before_training(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "loss._target_=test_evaluator_preflight.LossWithoutCount",
                 "+evaluator.loss_weight=masked_tokens", f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("xdllm: error: the evaluator MLMEvaluator cannot score the loss on the batches of "
                            "collator.val: MLMEvaluator: loss_weight='masked_tokens' is not an entry of the loss's "
                            "output, which has: loss (evaluator.loss_weight=null weighs each batch by the loss's "
                            "token count, or by its samples)")
    assert not (run_dir / "checkpoints").exists()
    assert main(["train", *TINY, "trainer.max_steps=2", "loss._target_=test_evaluator_preflight.LossWithoutCount",
                 f"run_dir={run_dir}"]) == 0  # weighed by the token count the loss inherits
