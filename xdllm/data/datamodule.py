"""A task's data: an exact-resume training stream and held-out splits, without Lightning.

:class:`DiffusionData` is what generation and evaluation read held-out splits from (loading it
does not load Lightning, a second of every ``xdllm generate``); training hands Lightning its
subclass :class:`xdllm.data.lightning_datamodule.DiffusionDataModule`.

Training reads an infinite stream (:mod:`xdllm.data.samplers`): which samples an optimizer step
sees depends only on the step, so resuming from a checkpoint continues the stream exactly, and
the global batch is the same for any number of devices. The trainer must run with
``use_distributed_sampler=False``: the samplers shard by rank themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.utils.data import DataLoader, Dataset

from xdllm.data.fd_sharing import quiet_sharer_resets
from xdllm.data.named_collate import NamedCollate
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.samplers import (
    FixedBatchSampler,
    MicroBatchCollate,
    StreamIndex,
    TrainStreamBatchSampler,
    even_shard_batches,
)
from xdllm.data.tasks import (
    SampleKey,
    Task,
    TokenizedTask,
    draw_sample,
    drawn_example,
    example,
    held_out_draws,
    sample_keys,
)
from xdllm.data.worker_signals import ignore_stop_signals
from xdllm.interfaces import Collator, Example, Tokenizer


class TrainStream(Dataset):
    """Training sample at a :class:`StreamIndex`, redrawn away from the held-out samples."""

    def __init__(self, task: Task | TokenizedTask | PreparedTask, tokenizer: Tokenizer, seed: int,
                 exclude: frozenset[SampleKey]) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.seed = seed
        self.exclude = exclude

    def __getitem__(self, index: StreamIndex) -> Example:
        return example(self.task, self.tokenizer, "train", index.position, self.seed, step=index.step,
                       exclude=self.exclude)


class DiffusionData:
    """Train / validation / test loaders for a :class:`~xdllm.data.tasks.Task`.

    - ``train_dataloader``: one item per optimizer step, the list of this rank's
      ``accumulate_grad_batches`` micro-batches of the training stream, starting at the
      trainer's ``global_step`` and ending at ``max_steps`` (default: the trainer's
      ``max_steps``; None and no trainer limit = endless).
    - ``val_dataloader``: one loader per entry of ``validation_roles`` (default both), over
      the same ``num_val_samples`` validation samples: ``"loss"`` through ``val_collator``
      (validation loss, deterministic corruption), ``"prediction"`` through
      ``prediction_collator`` (generation metrics; leave it out where generated text has no
      reference to match, e.g. free text).
    - ``test_dataloader`` / ``predict_dataloader``: ``num_predict_samples`` test samples through
      ``prediction_collator``.

    Evaluation loaders shard by rank with :func:`~xdllm.data.samplers.even_shard_batches`; the
    rank, the world size and the step the stream starts at are the attached ``trainer``'s (none:
    one process from step 0).
    """

    trainer = None

    def __init__(self, task: Task | TokenizedTask | PreparedTask, tokenizer: Tokenizer, train_collator: Collator,
                 val_collator: Collator, prediction_collator: Collator, batch_size: int = 64,
                 eval_batch_size: int = 128,
                 num_val_samples: int = 512, num_predict_samples: int = 512, seed: int = 0,
                 num_workers: int = 0, max_steps: int | None = None, accumulate_grad_batches: int = 1,
                 validation_roles: Sequence[str] = ("loss", "prediction")) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size),
                            ("accumulate_grad_batches", accumulate_grad_batches)):
            if value < 1:
                raise ValueError(f"{type(self).__name__}: {name} must be >= 1, got {value}")
        for name, value in (("num_val_samples", num_val_samples), ("num_predict_samples", num_predict_samples),
                            ("seed", seed), ("num_workers", num_workers)):
            if value < 0:
                raise ValueError(f"{type(self).__name__}: {name} must be >= 0, got {value}")
        if isinstance(task, PreparedTask):
            task.check_held_out("validation", num_val_samples, "data.num_val_samples")
            task.check_held_out("test", num_predict_samples, "data.num_test_samples")
        unknown = [role for role in validation_roles if role not in ("loss", "prediction")]
        if unknown or not validation_roles or len(set(validation_roles)) != len(validation_roles):
            raise ValueError(f"{type(self).__name__}: validation_roles must be distinct entries of "
                             f"'loss' and 'prediction', got {list(validation_roles)}")
        self.validation_roles = tuple(validation_roles)
        self.task = task
        self.tokenizer = tokenizer
        self.train_collator = train_collator
        self.val_collator = val_collator
        self.prediction_collator = prediction_collator
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_val_samples = num_val_samples
        self.num_predict_samples = num_predict_samples
        self.seed = seed
        self.num_workers = num_workers
        self.max_steps = max_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.stream_origin = (0, 0)
        """A step and the training stream position of its first sample (a resume sets it)."""
        self._draws: dict[str, list[tuple[list, list]]] = {}
        self._held_out: dict[str, list[Example]] = {}

    @property
    def max_new_tokens(self) -> int:
        """Tokens a predictor must generate: the longest target plus eos."""
        return self.task.max_target_len + 1

    def setup(self, stage: str | None = None) -> None:
        self.held_out_examples("validation")

    @property
    def excluded_from_training(self) -> frozenset[SampleKey]:
        """Every held-out sample this run evaluates on; the training stream never yields one
        (none for prepared data: its splits were separated when it was prepared)."""
        if isinstance(self.task, PreparedTask):
            return frozenset()
        return sample_keys(self._held_out_draws("validation")) | sample_keys(self._held_out_draws("test"))

    def check_training_stream(self, samples: int = 8) -> None:
        """Draw the first ``samples`` training samples away from the held-out sets: a task the
        held-out sets (nearly) cover is a ``ValueError`` here, before training starts, rather than
        an error inside a loader process."""
        if isinstance(self.task, PreparedTask):
            return
        exclude = self.excluded_from_training
        for index in range(samples):
            try:
                draw_sample(self.task, "train", index, self.seed, exclude)
            except RuntimeError as error:
                raise ValueError(str(error)) from None

    def held_out_examples(self, split: str) -> list[Example]:
        """The first ``num_val_samples`` validation or ``num_predict_samples`` test examples
        (each split drawn once, when first needed)."""
        if split not in self._held_out:
            if isinstance(self.task, PreparedTask):
                self._held_out[split] = [self.task.example(split, index, self.seed)
                                         for index in range(self._held_out_count(split))]
            else:
                self._held_out[split] = [drawn_example(self.task, self.tokenizer, split, index, prompt, target)
                                         for index, (prompt, target) in enumerate(self._held_out_draws(split))]
        return self._held_out[split]

    def _held_out_count(self, split: str) -> int:
        counts = {"validation": self.num_val_samples, "test": self.num_predict_samples}
        if split not in counts:
            raise ValueError(f"{type(self).__name__}: held-out split must be 'validation' or 'test', got {split!r}")
        return counts[split]

    def _held_out_draws(self, split: str) -> list[tuple[list, list]]:
        if split not in self._draws:
            self._draws[split] = held_out_draws(self.task, split, self.seed, self._held_out_count(split))
        return self._draws[split]

    def _rank_and_world_size(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def _start_step(self) -> int:
        return 0 if self.trainer is None else self.trainer.global_step

    def _resolved_max_steps(self) -> int | None:
        if self.max_steps is not None or self.trainer is None:
            return self.max_steps
        return self.trainer.max_steps if self.trainer.max_steps >= 0 else None

    def train_sampler(self) -> TrainStreamBatchSampler:
        """This rank's training batch sampler, laid out from the attached trainer (if any)."""
        rank, world_size = self._rank_and_world_size()
        return TrainStreamBatchSampler(self.batch_size, self._start_step, rank=rank, world_size=world_size,
                                       accumulate_grad_batches=self.accumulate_grad_batches,
                                       max_steps=self._resolved_max_steps(), origin=lambda: self.stream_origin)

    def train_dataloader(self) -> DataLoader:
        stream = TrainStream(self.task, self.tokenizer, self.seed, self.excluded_from_training)
        quiet_sharer_resets()  # before the workers fork: they inherit it
        return DataLoader(stream, batch_sampler=self.train_sampler(),
                          collate_fn=MicroBatchCollate(NamedCollate(self.train_collator, "collator.train"),
                                                       self.batch_size),
                          num_workers=self.num_workers, worker_init_fn=ignore_stop_signals)

    def held_out_dataloader(self, split: str, role: str) -> DataLoader:
        """``split`` ("validation" or "test") collated for ``role``: "loss" (the val collator,
        deterministic corruption) or "prediction" (the prediction collator); sharded by rank."""
        collators = {"loss": NamedCollate(self.val_collator, "collator.val"),
                     "prediction": NamedCollate(self.prediction_collator, "collator.prediction")}
        if role not in collators:
            raise ValueError(f"{type(self).__name__}: role must be 'loss' or 'prediction', got {role!r}")
        examples = self.held_out_examples(split)
        rank, world_size = self._rank_and_world_size()
        batches = even_shard_batches(len(examples), self.eval_batch_size, rank, world_size)
        return DataLoader(examples, batch_sampler=FixedBatchSampler(batches), collate_fn=collators[role],
                          num_workers=self.num_workers, worker_init_fn=ignore_stop_signals)

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per entry of :attr:`validation_roles`, in that order."""
        return [self.held_out_dataloader("validation", role) for role in self.validation_roles]

    def test_dataloader(self) -> DataLoader:
        return self.held_out_dataloader("test", "prediction")

    def predict_dataloader(self) -> DataLoader:
        return self.held_out_dataloader("test", "prediction")
