"""The Lightning datamodule training runs on: :class:`~xdllm.data.datamodule.DiffusionData` as a
``LightningDataModule`` (the trainer attaches itself, so the training stream starts at its
restored ``global_step`` and shards by its rank)."""

from __future__ import annotations

import lightning as L

from xdllm.data.datamodule import DiffusionData


class DiffusionDataModule(DiffusionData, L.LightningDataModule):
    """:class:`DiffusionData` for ``Trainer.fit(module, datamodule=...)``; the same arguments.
    The trainer must run with ``use_distributed_sampler=False``: the samplers shard by rank
    themselves."""
