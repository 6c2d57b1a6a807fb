"""The Lightning datamodule training runs on: :class:`~xdllm.data.datamodule.DiffusionData` as a
``LightningDataModule`` (the trainer attaches itself, so the training stream starts at its
restored ``global_step`` and shards by its rank). A checkpoint records where the training stream
is (the next step and the position of its first sample), so that a run resumed with another
global batch goes on from there."""

from __future__ import annotations

import lightning as L

from xdllm.data.datamodule import DiffusionData


class DiffusionDataModule(DiffusionData, L.LightningDataModule):
    """:class:`DiffusionData` for ``Trainer.fit(module, datamodule=...)``; the same arguments.
    The trainer must run with ``use_distributed_sampler=False``: the samplers shard by rank
    themselves."""

    def state_dict(self) -> dict[str, int]:
        """The next step and the stream position of its first sample."""
        origin_step, origin_position = self.stream_origin
        batch = self.train_sampler().global_batch
        return {"step": self.trainer.global_step,
                "position": origin_position + (self.trainer.global_step - origin_step) * batch}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.stream_origin = (int(state_dict["step"]), int(state_dict["position"]))
