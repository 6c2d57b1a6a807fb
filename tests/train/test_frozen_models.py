"""A run can hold frozen models beside the trainable one: the loss reaches them through its
context, they never train, and checkpoints store only where they came from."""

from pathlib import Path

import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.checkpoint import load_trained
from xdllm_models.mlm.loss import MLMLoss


class DistillToTeacherLoss:
    """The MLM loss plus the squared gap between the student's and a frozen teacher's logits."""

    def __init__(self, mask_token_id: int) -> None:
        self.mlm = MLMLoss(mask_token_id)

    def __call__(self, model, batch, context=None):
        teacher = context.frozen["teacher"]
        assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
        inputs = dict(attention_mask=batch["attention_mask"], positions=batch["positions"])
        with torch.no_grad():
            target = teacher(batch["input_ids"], **inputs)
        gap = (model(batch["input_ids"], **inputs) - target).pow(2).mean()
        out = self.mlm(model, batch)
        return {"loss": out["loss"] + gap, "teacher_gap": gap.detach()}


def test_frozen_teacher_is_used_never_trained_and_not_stored(tmp_path: Path):
    teacher_dir, student_dir = tmp_path / "teacher", tmp_path / "student"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={teacher_dir}"]) == 0
    teacher_before = {k: v.clone() for k, v in load_trained(teacher_dir).model.state_dict().items()}
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=3",
                 f"+frozen.teacher={teacher_dir}", f"run_dir={student_dir}",
                 "loss._target_=test_frozen_models.DistillToTeacherLoss"]) == 0

    checkpoint = torch.load(student_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert all(key.startswith("model.") for key in checkpoint["state_dict"])
    assert len(checkpoint["state_dict"]) == len(teacher_before)  # the student's weights only
    source = checkpoint["xdllm_frozen_sources"]["teacher"]
    assert Path(source["checkpoint"]).parent == (teacher_dir / "checkpoints").resolve()
    assert source["global_step"] == 2 and source["model_family"] == "mlm"

    student = load_trained(student_dir)
    for key, value in student.frozen["teacher"].state_dict().items():
        assert torch.equal(value, teacher_before[key]), key
    assert not torch.equal(student.model.state_dict()["transformer.lm_head.weight"],
                           teacher_before["transformer.lm_head.weight"])
