"""A prepared dataset as a task (``task=prepared task.params.path=DIR``): out-of-core training.

The splits are the ones fixed when the data was prepared. Training position ``p`` reads sample
:class:`~xdllm.data.epoch_order.EpochOrder` ``(p)`` of the train split: epoch after epoch, each in
its own seeded order. Together with the training stream's layout
(:mod:`xdllm.data.samplers`: the positions of step ``s`` depend only on ``s``; rank ``r`` gets
its own slice of them) this gives exact resume mid-epoch and disjoint ranks that cover each
epoch. Held-out sample ``i`` of validation or test is sample ``i`` of that split.

Samples are read from the memory-mapped files when asked for; the task itself holds the
manifest and the epoch order's keys, whatever the corpus size. A dataset prepared with another
tokenizer than the run's is refused (their fingerprints differ).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar

from xdllm.data.epoch_order import EpochOrder
from xdllm.data.prepared_store import PreparedData
from xdllm.interfaces import Example, Tokenizer


class PreparedTask:
    """The samples of a prepared dataset: documents (empty prompt) or prompt/response pairs."""

    name: ClassVar[str] = "prepared"
    needs_tokenizer: ClassVar[bool] = True

    def __init__(self, path: str | Path, tokenizer: Tokenizer) -> None:
        self.data = PreparedData(path)
        recorded = self.data.manifest["tokenizer"]
        if recorded["fingerprint"] != tokenizer.fingerprint:
            raise ValueError(
                f"prepared data {self.data.folder} was made with another tokenizer ({recorded['source']}, "
                f"{recorded['vocab_size']} tokens, fingerprint {recorded['fingerprint'][:12]}) than this run's "
                f"({tokenizer.vocab_size} tokens, fingerprint {tokenizer.fingerprint[:12]}): train with the "
                "tokenizer it was prepared with, or prepare it again with this one")
        if self.data.split_info("train")["samples"] < 1:
            raise ValueError(f"prepared data {self.data.folder} has an empty train split")
        self._order: EpochOrder | None = None
        self._order_seed: int | None = None

    @property
    def source_sha256(self) -> str:
        """The digest of the manifest but its creation time (tokenizer, sources, options, each
        split's counts): a resumed run whose data was prepared differently reads other samples."""
        manifest = {key: value for key, value in self.data.manifest.items() if key != "created"}
        return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()

    @property
    def max_prompt_len(self) -> int:
        return max(self.data.split_info(split)["longest_prompt"] for split in ("train", "validation", "test"))

    @property
    def max_target_len(self) -> int:
        return max(self.data.split_info(split)["longest_target"] for split in ("train", "validation", "test"))

    def split_size(self, split: str) -> int:
        return self.data.split_info(split)["samples"]

    def check_held_out(self, split: str, count: int, option: str) -> None:
        """A run may evaluate on at most the samples a held-out split holds."""
        available = self.split_size(split)
        fraction = f"--{'val' if split == 'validation' else 'test'}-fraction"
        if count > 0 and available == 0:
            raise ValueError(f"prepared data {self.data.folder} has no {split} split (prepared with {fraction} 0): "
                             f"prepare it again with {fraction} above 0")
        if count > available:
            raise ValueError(f"the {split} split of prepared data {self.data.folder} holds {available} samples, "
                             f"fewer than {option}={count}: set {option} to at most {available}, or prepare the "
                             f"data with a larger {fraction}")

    def sample_of(self, split: str, index: int, seed: int) -> int:
        """The stored sample read at ``index``: the training position's place in its epoch's
        order, or the held-out sample ``index`` itself."""
        if split != "train":
            return index
        if self._order is None or self._order_seed != seed:
            self._order, self._order_seed = EpochOrder(self.split_size("train"), seed), seed
        return self._order(index)

    def example(self, split: str, index: int, seed: int, step: int = 0) -> Example:
        prompt, target = self.data.split(split).sample(self.sample_of(split, index, seed))
        return Example(prompt_ids=prompt, target_ids=target, sample_index=index, step=step)
