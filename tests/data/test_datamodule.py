from itertools import islice
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from xdllm.data.builtin_tasks import SortTask
from xdllm.data.datamodule import TrainStream
from xdllm.data.lightning_datamodule import DiffusionDataModule
from xdllm.data.samplers import StreamIndex, TrainStreamBatchSampler, even_shard_batches
from xdllm.data.tasks import example
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.mlm.collator import MLMSeq2SeqPredCollator, MLMSeq2SeqTrainCollator

TOKENIZER = builtin_tokenizer()


def _positions(sampler, num_batches):
    return [[index.position for index in batch] for batch in islice(sampler, num_batches)]


def test_sampler_lays_out_positions_by_step_and_rank():
    single = TrainStreamBatchSampler(batch_size=3, start_step=lambda: 0)
    assert _positions(single, 2) == [[0, 1, 2], [3, 4, 5]]
    rank0 = TrainStreamBatchSampler(batch_size=2, start_step=lambda: 0, rank=0, world_size=2)
    rank1 = TrainStreamBatchSampler(batch_size=2, start_step=lambda: 0, rank=1, world_size=2)
    assert _positions(rank0, 2) == [[0, 1], [4, 5]]
    assert _positions(rank1, 2) == [[2, 3], [6, 7]]
    assert [index.step for batch in islice(rank1, 2) for index in batch] == [0, 0, 1, 1]


def test_sampler_resumes_at_the_start_step_read_when_iteration_begins():
    step = {"value": 0}
    for world_size in (1, 2):
        samplers = [TrainStreamBatchSampler(2, lambda: step["value"], rank=rank, world_size=world_size)
                    for rank in range(world_size)]
        step["value"] = 0
        fresh = [list(islice(sampler, 5)) for sampler in samplers]
        step["value"] = 3  # e.g. restored from a checkpoint after the sampler was built
        resumed = [list(islice(sampler, 2)) for sampler in samplers]
        assert resumed == [batches[3:5] for batches in fresh]
        assert resumed[0][0][0] == StreamIndex(position=3 * 2 * world_size, step=3)


def test_sampler_with_accumulation_and_max_steps():
    sampler = TrainStreamBatchSampler(2, lambda: 1, rank=1, world_size=2, accumulate_grad_batches=2, max_steps=3)
    steps = list(sampler)  # steps 1 and 2, two micro-batches each, concatenated per step
    assert [[index.position for index in step] for step in steps] == [[10, 11, 14, 15], [18, 19, 22, 23]]
    assert [[index.step for index in step] for step in steps] == [[1] * 4, [2] * 4]
    assert list(TrainStreamBatchSampler(2, lambda: 3, max_steps=3)) == []


def test_even_shards_cover_every_sample_once_with_equal_batch_counts():
    for num_samples, world_size, batch_size in [(10, 4, 2), (512, 1, 128), (500, 1, 128), (7, 3, 100), (9, 3, 2)]:
        shards = [even_shard_batches(num_samples, batch_size, rank, world_size) for rank in range(world_size)]
        flat = sorted(i for shard in shards for batch in shard for i in batch)
        assert flat == list(range(num_samples))
        assert len({len(shard) for shard in shards}) == 1
        assert all(0 < len(batch) <= batch_size for shard in shards for batch in shard)
    assert even_shard_batches(10, 2, rank=1, world_size=4) == [[1, 5], [9]]
    with pytest.raises(ValueError, match="non-empty batches"):
        even_shard_batches(3, 8, rank=0, world_size=4)


def _datamodule(task=None, trainer=None, **kwargs):
    datamodule = DiffusionDataModule(
        task=task or SortTask(length=4), tokenizer=TOKENIZER,
        train_collator=MLMSeq2SeqTrainCollator(TOKENIZER, seed=1),
        val_collator=MLMSeq2SeqTrainCollator(TOKENIZER, seed=1),
        prediction_collator=MLMSeq2SeqPredCollator(TOKENIZER), **kwargs)
    datamodule.trainer = trainer
    return datamodule


def _fake_trainer(global_step=0, rank=0, world_size=1, max_steps=-1):
    return SimpleNamespace(global_step=global_step, global_rank=rank, world_size=world_size,
                           accumulate_grad_batches=1, max_steps=max_steps)


def test_global_batch_is_the_same_for_any_world_size():
    single = _datamodule(trainer=_fake_trainer(global_step=2), batch_size=4, num_val_samples=8, num_predict_samples=8)
    [global_batch] = next(iter(single.train_dataloader()))
    shards = [next(iter(_datamodule(trainer=_fake_trainer(global_step=2, rank=rank, world_size=2), batch_size=2,
                                    num_val_samples=8, num_predict_samples=8).train_dataloader()))[0]
              for rank in range(2)]
    for key in ("input_ids", "target_ids", "sample_index"):
        assert torch.equal(global_batch[key], torch.cat([shard[key] for shard in shards]))
    assert global_batch["sample_index"].tolist() == [8, 9, 10, 11]


def test_resumed_loader_reproduces_the_batches_including_their_noise():
    trainer = _fake_trainer()
    datamodule = _datamodule(trainer=trainer, batch_size=8, num_val_samples=8, num_predict_samples=8, max_steps=6)
    loader = datamodule.train_dataloader()
    straight = list(loader)
    assert len(straight) == 6
    trainer.global_step = 4
    resumed = list(loader)
    assert len(resumed) == 2
    for [expected], [got] in zip(straight[4:], resumed):
        assert all(torch.equal(expected[key], got[key]) for key in expected)
    assert not torch.equal(straight[4][0]["input_ids"], straight[5][0]["input_ids"])


def test_one_loader_item_is_the_list_of_a_steps_micro_batches():
    datamodule = _datamodule(trainer=_fake_trainer(), batch_size=2, num_val_samples=8,
                             num_predict_samples=8, max_steps=2, accumulate_grad_batches=3)
    steps = list(datamodule.train_dataloader())
    assert [len(step) for step in steps] == [3, 3]
    assert [batch["sample_index"].tolist() for batch in steps[1]] == [[6, 7], [8, 9], [10, 11]]


def test_training_stream_never_yields_a_held_out_sample():
    task = SortTask(length=2)  # 100 possible samples
    datamodule = _datamodule(task=task, batch_size=16, num_val_samples=20, num_predict_samples=20, max_steps=40)
    held_out = {(tuple(e["prompt_ids"]), tuple(e["target_ids"]))
                for split in ("validation", "test") for e in datamodule.held_out_examples(split)}
    stream = TrainStream(task, TOKENIZER, seed=0, exclude=datamodule.excluded_from_training)
    drawn = {(tuple(e["prompt_ids"]), tuple(e["target_ids"]))
             for e in (stream[StreamIndex(p, 0)] for p in range(640))}
    assert drawn.isdisjoint(held_out)
    assert len(drawn) + len(held_out) >= 95  # the rest of the space is still used


class CountingSortTask(SortTask):
    """A sort task that counts its draws."""

    def __init__(self, length):
        super().__init__(length=length)
        self.draws = 0

    def generate(self, rng):
        self.draws += 1
        return super().generate(rng)


def test_each_held_out_sample_is_drawn_once_and_a_split_only_when_needed():
    task = CountingSortTask(length=4)  # a sudoku draw costs ~7 ms: 3,072 held-out puzzles drew twice
    datamodule = _datamodule(task=task, num_val_samples=5, num_predict_samples=7)
    validation = datamodule.held_out_examples("validation")
    assert task.draws == 5  # the test split is not drawn for validation
    assert validation == [example(SortTask(length=4), TOKENIZER, "validation", i, seed=0) for i in range(5)]
    excluded = datamodule.excluded_from_training
    test = datamodule.held_out_examples("test")
    assert task.draws == 12
    symbols = [tuple(TOKENIZER.decode(e[key]).split())
               for e in validation + test for key in ("prompt_ids", "target_ids")]
    assert excluded == set(zip(symbols[::2], symbols[1::2]))


def test_a_task_the_held_out_sets_cover_is_refused_before_training():
    covered = _datamodule(task=SortTask(length=1), num_val_samples=40, num_predict_samples=40)  # 10 samples
    with pytest.raises(ValueError, match=r"held-out set \(10 distinct samples\) covers .*data.num_val_samples"):
        covered.check_training_stream()
    _datamodule(task=SortTask(length=2), num_val_samples=40, num_predict_samples=40).check_training_stream()


def test_validation_roles_test_split_and_max_new_tokens():
    datamodule = _datamodule(task=SortTask(length=5), num_val_samples=10, num_predict_samples=6, eval_batch_size=4)
    datamodule.setup("fit")
    assert datamodule.validation_roles == ("loss", "prediction")
    assert datamodule.max_new_tokens == 6
    loss_loader, prediction_loader = datamodule.val_dataloader()
    loss_batches, prediction_batches = list(loss_loader), list(prediction_loader)
    assert [b["sample_index"].tolist() for b in loss_batches] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [b["sample_index"].tolist() for b in prediction_batches] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    first = example(SortTask(length=5), TOKENIZER, "validation", 0, seed=0)
    assert loss_batches[0]["target_ids"][0, 6:12].tolist() == first["target_ids"] + [TOKENIZER.eos_token_id]
    assert prediction_batches[0]["input_ids"][0].tolist() == [TOKENIZER.bos_token_id] + first["prompt_ids"]
    assert set(prediction_batches[0]) == {"input_ids", "attention_mask", "target_ids", "sample_index"}
    test_batches = list(datamodule.test_dataloader())
    test_first = example(SortTask(length=5), TOKENIZER, "test", 0, seed=0)
    assert [b["sample_index"].tolist() for b in test_batches] == [[0, 1, 2], [3, 4, 5]]
    assert test_batches[0]["input_ids"][0, 1:].tolist() == test_first["prompt_ids"]
    assert [b["sample_index"].tolist() for b in datamodule.predict_dataloader()] == [[0, 1, 2], [3, 4, 5]]


def test_eval_loaders_shard_by_rank_without_duplicates():
    seen = []
    for rank in range(3):
        datamodule = _datamodule(trainer=_fake_trainer(rank=rank, world_size=3), num_val_samples=10,
                                 num_predict_samples=4, eval_batch_size=2)
        batches = list(datamodule.val_dataloader()[1])
        assert len(batches) == 2
        seen += [i for batch in batches for i in batch["sample_index"].tolist()]
    assert sorted(seen) == list(range(10))


class _RecordingModule(L.LightningModule):
    """Records the sample indices each optimizer step trains on."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[list[int]] = []

    def training_step(self, micro_batches, batch_idx):
        self.seen.append([i for batch in micro_batches for i in batch["sample_index"].tolist()])
        return (self.weight - 1.0) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path, max_steps, ckpt_path=None):
    module = _RecordingModule()
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0,
                        use_distributed_sampler=False, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=_datamodule(batch_size=2, num_val_samples=4, num_predict_samples=4),
                ckpt_path=ckpt_path)
    return trainer, module.seen


def test_lightning_resume_continues_the_stream_exactly(tmp_path):
    _, straight = _fit(tmp_path, max_steps=5)
    assert straight == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    trainer, _ = _fit(tmp_path, max_steps=3)
    trainer.save_checkpoint(tmp_path / "step3.ckpt")
    _, resumed = _fit(tmp_path, max_steps=5, ckpt_path=tmp_path / "step3.ckpt")
    assert resumed == straight[3:]
