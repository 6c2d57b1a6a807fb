"""A sample a collator cannot lay out (longer than an EOS fill's slots, or than max_length) stops
the run with one line naming the collator's config node, from a loader worker too, and says
where training stopped and how to continue once fixed."""

import pytest
from tiny_run import TINY
from torch.utils.data import DataLoader

from xdllm.cli.main import main
from xdllm.data.named_collate import NamedCollate
from xdllm.errors import CollateError
from xdllm_models.mlm.collator import MLMSeq2SeqTrainCollator


def _refuses_seven(samples):
    if 7 in samples:
        raise ValueError("LengthyCollator: sample 7 has a target of 9 tokens; target_length=4 leaves no room")
    return samples


@pytest.mark.parametrize("workers", [0, 1])
def test_a_refused_batch_is_the_collators_words_and_its_node(workers):
    loader = DataLoader(list(range(12)), batch_size=4, num_workers=workers,
                        collate_fn=NamedCollate(_refuses_seven, "collator.val"))
    batches = iter(loader)
    assert next(batches) == [0, 1, 2, 3]
    with pytest.raises(CollateError) as refused:
        next(batches)
    assert str(refused.value) == ("collator.val: LengthyCollator: sample 7 has a target of 9 tokens; "
                                  "target_length=4 leaves no room")  # not the worker's traceback


def test_training_stopped_by_a_refused_batch_says_how_to_continue(tmp_path, monkeypatch, capsys):
    collate = MLMSeq2SeqTrainCollator.__call__

    def refuses_step_two(self, examples):
        if any(sample["step"] == 2 for sample in examples):
            raise ValueError("MLMSeq2SeqTrainCollator: sample 5 has a target of 9 tokens; target_length=4 leaves "
                             "no room for its EOS")
        return collate(self, examples)

    monkeypatch.setattr(MLMSeq2SeqTrainCollator, "__call__", refuses_step_two)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=1", f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"xdllm: error: collator.train: MLMSeq2SeqTrainCollator: sample 5 has a target of 9 tokens; "
                     f"target_length=4 leaves no room for its EOS (training stopped at step 1; once fixed, continue "
                     f"with: xdllm train resume={run_dir} KEY=VALUE)")
    # step 1's checkpoint is kept: the loader draws step 2's batch (index 2) while step 1 runs
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
