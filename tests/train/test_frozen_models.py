"""A run can hold frozen models beside the trainable one: the loss reaches them through its
context, they never train, and checkpoints store only where they came from."""

from pathlib import Path

import torch
from omegaconf import OmegaConf
from tiny_run import TINY, TINY_TEXT

from xdllm.cli.main import main
from xdllm.run.checkpoint import load_trained
from xdllm.run.frozen_models import load_frozen_models
from xdllm_models.mlm.loss import MLMLoss

STORIES = Path(__file__).parents[2] / "experiments" / "data"


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


def test_a_frozen_model_loads_without_its_run_s_data(tmp_path: Path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((STORIES / "stories.txt").read_text())
    teacher_dir = tmp_path / "teacher"
    assert main(["train", "task=text_file", f"task.params.path={corpus}", "model=mdlm", *TINY_TEXT,
                 f"tokenizer={STORIES / 'stories_tokenizer.json'}", "generate_after_train=false",
                 f"run_dir={teacher_dir}"]) == 0
    trained = load_trained(teacher_dir).model.state_dict()
    corpus.unlink()  # the teacher's own data, which a frozen teacher does not need

    models, sources = load_frozen_models(OmegaConf.create({"frozen": {"teacher": str(teacher_dir)}}))
    teacher = models["teacher"]
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert teacher.state_dict().keys() == trained.keys()
    assert all(torch.equal(value, trained[key]) for key, value in teacher.state_dict().items())
    assert sources["teacher"]["model_family"] == "mdlm" and sources["teacher"]["global_step"] == 4
