"""Training on prepared data: epochs in a seeded order, exact resume, disjoint DDP ranks,
packing, and refusal of data prepared with another tokenizer."""

import pickle
from collections import Counter
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from prepared_data_helpers import documents_of, prepare_documents

from xdllm.cli.main import main
from xdllm.config.compose import compose_config
from xdllm.data.epoch_order import EpochOrder, EpochPermutation
from xdllm.data.lightning_datamodule import DiffusionDataModule
from xdllm.data.prepared_store import PreparedData
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.tasks import TaskParameterError, get_task
from xdllm.data.tokenizer import builtin_tokenizer, load_tokenizer
from xdllm.run.build import build_components
from xdllm_models.mlm.collator import MLMSeq2SeqPredCollator
from xdllm_models.mlm.packed_collator import PackedMLMCollator

TOKENIZER = builtin_tokenizer()
STORIES_TOKENIZER = Path(__file__).parents[2] / "experiments" / "data" / "stories_tokenizer.json"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """50 documents: 40 train, 5 validation, 5 test."""
    folder = tmp_path_factory.mktemp("prepared") / "docs"
    prepare_documents(folder, 50)
    return folder


def _train_documents(folder: Path) -> list[tuple[int, ...]]:
    split = PreparedData(folder).split("train")
    return [tuple(split.sample(i)[1]) for i in range(len(split))]


def _datamodule(folder, trainer=None, collator=documents_of, **kwargs):
    datamodule = DiffusionDataModule(
        task=PreparedTask(folder, TOKENIZER), tokenizer=TOKENIZER, train_collator=collator,
        val_collator=collator, prediction_collator=MLMSeq2SeqPredCollator(TOKENIZER),
        **{"num_val_samples": 5, "num_predict_samples": 5, **kwargs})
    datamodule.trainer = trainer
    return datamodule


def _fake_trainer(global_step=0, rank=0, world_size=1):
    return SimpleNamespace(global_step=global_step, global_rank=rank, world_size=world_size, max_steps=-1)


def _documents(step_batches) -> list[tuple[int, ...]]:
    return [document for micro_batches in step_batches for batch in micro_batches for document in batch["documents"]]


@pytest.mark.parametrize("size", [*range(1, 40), 257, 1000])
def test_epoch_permutation_is_a_bijection_of_any_size(size):
    assert sorted(EpochPermutation(size, seed=3, epoch=1)(k) for k in range(size)) == list(range(size))


def test_epoch_orders_differ_by_epoch_and_seed_and_are_shuffled():
    orders = {(seed, epoch): [EpochPermutation(1000, seed, epoch)(k) for k in range(1000)]
              for seed in (0, 1) for epoch in (0, 1)}
    assert len({tuple(order) for order in orders.values()}) == 4
    for order in orders.values():
        assert sum(k == value for k, value in enumerate(order)) < 10  # about one fixed point expected
        assert abs(sum(order[:500]) / 500 - 499.5) < 60  # each half draws from the whole range
    assert [EpochOrder(1000, seed=1)(p) for p in range(1000, 2000)] == orders[(1, 1)]


def test_each_epoch_visits_every_training_document_once(prepared):
    datamodule = _datamodule(prepared, trainer=_fake_trainer(), batch_size=5, max_steps=16)
    seen = _documents(datamodule.train_dataloader())
    train = _train_documents(prepared)
    assert len(seen) == 80 and sorted(seen[:40]) == sorted(train) == sorted(seen[40:])
    assert seen[:40] != train and seen[:40] != seen[40:]  # shuffled, differently each epoch
    validation = [tuple(e["target_ids"]) for e in datamodule.held_out_examples("validation")]
    assert not set(validation) & set(train) and len(validation) == 5


class _RecordingModule(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[tuple[int, ...]] = []

    def training_step(self, micro_batches, batch_idx):
        self.seen += [document for batch in micro_batches for document in batch["documents"]]
        return (self.weight - 1.0) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(folder, root, max_steps, ckpt_path=None):
    module = _RecordingModule()
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0,
                        use_distributed_sampler=False, default_root_dir=root)
    trainer.fit(module, datamodule=_datamodule(folder, batch_size=6), ckpt_path=ckpt_path)
    return trainer, module.seen


def test_resume_mid_epoch_continues_the_exact_order(prepared, tmp_path):
    _, straight = _fit(prepared, tmp_path, max_steps=9)  # 54 samples: the epoch of 40 ends inside step 6
    trainer, _ = _fit(prepared, tmp_path, max_steps=4)
    trainer.save_checkpoint(tmp_path / "step4.ckpt")
    _, resumed = _fit(prepared, tmp_path, max_steps=9, ckpt_path=tmp_path / "step4.ckpt")
    assert resumed == straight[24:]
    assert sorted(straight[:40]) == sorted(_train_documents(prepared))


def _rank_documents(rank: int, world_size: int, folder: Path, rendezvous: Path, results: Path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size)
    try:
        trainer = _fake_trainer(rank=dist.get_rank(), world_size=dist.get_world_size())
        datamodule = _datamodule(folder, trainer=trainer, batch_size=4)
        seen = _documents(islice(datamodule.train_dataloader(), 5))  # 5 steps x 4 x 2 ranks = one epoch
        gathered = [None] * world_size
        dist.all_gather_object(gathered, seen)
        if rank == 0:
            torch.save(gathered, results)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_two_gloo_processes_see_disjoint_samples_covering_the_epoch(prepared, tmp_path):
    results = tmp_path / "seen.pt"
    mp.start_processes(_rank_documents, args=(2, prepared, tmp_path / "rendezvous", results), nprocs=2,
                       start_method="fork")
    rank0, rank1 = torch.load(results)
    assert len(rank0) == len(rank1) == 20 and not set(rank0) & set(rank1)
    assert sorted(rank0 + rank1) == sorted(_train_documents(prepared))


def test_packed_rows_hold_each_prepared_document_once(prepared):
    collator = PackedMLMCollator(TOKENIZER, row_length=16, seed=0)
    datamodule = _datamodule(prepared, trainer=_fake_trainer(), collator=collator, batch_size=8, max_steps=1)
    [[batch]] = list(datamodule.train_dataloader())
    task = datamodule.task
    expected = Counter((TOKENIZER.bos_token_id, *task.example("train", p, seed=0)["target_ids"],
                        TOKENIZER.eos_token_id) for p in range(8))
    segments = Counter()
    for row, segment_row in zip(batch["target_ids"], batch["segment_ids"]):
        for segment in segment_row.unique().tolist():
            if segment >= 0:
                segments[tuple(row[segment_row == segment].tolist())] += 1
    assert batch["target_ids"].shape[1] == 16 and segments == expected


def test_task_state_does_not_grow_with_the_corpus(tmp_path):
    sizes = []
    for count in (60, 900):
        prepare_documents(tmp_path / f"docs{count}", count)
        task = PreparedTask(tmp_path / f"docs{count}", TOKENIZER)
        for position in range(0, 3 * count, 7):  # read across three epochs
            task.example("train", position, seed=0)
        sizes.append(len(pickle.dumps(task)))
    assert abs(sizes[1] - sizes[0]) < 64, sizes


def test_data_prepared_with_another_tokenizer_is_refused(prepared, tmp_path, capsys):
    with pytest.raises(ValueError, match="made with another tokenizer"):
        PreparedTask(prepared, load_tokenizer(STORIES_TOKENIZER))
    code = main(["train", "task=prepared", f"task.params.path={prepared}", f"tokenizer={STORIES_TOKENIZER}",
                 f"run_dir={tmp_path / 'run'}"])
    error = capsys.readouterr().err
    assert code == 2 and "made with another tokenizer (builtin, 46 tokens" in error
    assert not (tmp_path / "run").exists()


def test_more_held_out_samples_than_the_split_holds_is_refused(prepared, tmp_path, capsys):
    code = main(["train", "task=prepared", f"task.params.path={prepared}", "data.num_val_samples=6",
                 f"run_dir={tmp_path / 'run'}"])
    error = capsys.readouterr().err
    assert code == 2 and "holds 5 samples, fewer than data.num_val_samples=6" in error


def test_eval_names_num_samples_past_a_split_s_size_and_free_text_is_not_bounded_by_it(prepared, tmp_path, capsys):
    """eval said ``fewer than data.num_test_samples=6: set data.num_test_samples (num_samples= for
    xdllm generate and eval)``, an option of training, for the num_samples=6 it was given. Free
    text generates from empty prompts, so generate writes 6 texts from a split of 5."""
    run = tmp_path / "run"
    assert main(["train", "task=prepared", f"task.params.path={prepared}", "data.num_val_samples=5",
                 "data.num_test_samples=5", "model.d_model=16", "model.n_layers=1", "model.n_heads=2",
                 "trainer.max_steps=1", "trainer.val_check_interval=1", "history.num_samples=0",
                 "generate_after_train=false", "trainer.enable_model_summary=false", f"run_dir={run}"]) == 0
    capsys.readouterr()
    for split, fraction in (("test", "--test-fraction"), ("validation", "--val-fraction")):
        assert main(["eval", f"ckpt={run}", f"split={split}", "num_samples=6"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"xdllm: error: the {split} split of prepared data {prepared} holds 5 samples, fewer than num_samples=6: "
            f"set num_samples to at most 5, or prepare the data with a larger {fraction}"]
    assert main(["generate", f"ckpt={run}", "num_samples=6", f"output_dir={tmp_path / 'six'}"]) == 0
    assert len((tmp_path / "six" / "predictions.jsonl").read_text().splitlines()) == 6


def test_prepared_data_without_a_validation_split_says_to_prepare_it_again(tmp_path, capsys):
    folder = tmp_path / "no_validation"
    prepare_documents(folder, 20, val_fraction=0.0, test_fraction=0.0)
    code = main(["train", "task=prepared", f"task.params.path={folder}", f"run_dir={tmp_path / 'run'}"])
    error = capsys.readouterr().err
    assert code == 2 and f"prepared data {folder} has no validation split (prepared with --val-fraction 0): " \
                         "prepare it again with --val-fraction above 0" in error


def test_a_text_experiment_on_prepared_data_names_the_parameter_to_drop(prepared, tmp_path, capsys):
    """experiment=text_mdlm sets task.params.max_tokens for text_file; on task=prepared that was a
    bare TypeError ("unexpected keyword argument 'max_tokens'") with no way out named."""
    line = ["experiment=text_mdlm", "task=prepared", f"task.params.path={prepared}", "tokenizer=builtin",
            "data.num_val_samples=5", "data.num_test_samples=5", "text_samples_after_train=5"]
    assert main(["train", *line, f"run_dir={tmp_path / 'run'}"]) == 2
    error = capsys.readouterr().err
    assert "task 'prepared' takes no parameter max_tokens (it takes: path)" in error
    assert "drop it with '~task.params.max_tokens'" in error
    components = build_components(compose_config("train", [*line, "~task.params.max_tokens"]))
    assert isinstance(components.task, PreparedTask)


def test_get_task_names_parameters_a_task_does_not_take():
    with pytest.raises(TaskParameterError, match=r"task 'sort' takes no parameter lenght, width \(it takes: length\)"):
        get_task("sort", lenght=3, width=2)
