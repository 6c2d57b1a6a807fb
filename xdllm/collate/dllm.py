"""``DLLMCollator``: variable-length token lists to block-aligned dLLM training tensors.

Samples arrive unshifted (``loss_mask[i]`` says whether token ``i`` itself is supervised). Every
row is laid out in one pass from the lists, with no intermediate pad-to-max::

    [content 0..c) [block fill c..fill_end) [global pad fill_end..T)

The block fill rounds the supervised part of a row up to whole diffusion blocks, so block-wise
corruption and block decoding always see complete blocks; it is supervised (the model learns to
emit end-of-sequence there). The global pad only evens out the row lengths. The exact rules are
in ``docs/collator.md``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, TypedDict

import torch
from jaxtyping import Bool, Float, Integer, Shaped
from torch import Tensor

SAMPLE_KEYS = ("input_ids", "loss_mask", "attention_mask")

# Per key: the ``array`` typecode used to convert the values ('q' takes integers and bools and
# rejects floats, strings and None; 'f' takes any real number), the output dtype, and what the
# values must be (for error messages).
_VALUE_TYPES = {
    "input_ids": ("q", torch.int64, "integer token ids"),
    "loss_mask": ("f", torch.float32, "real numbers (0/1, bool or a weight)"),
    "attention_mask": ("q", torch.int64, "integers (0/1 or bool)"),
}


class DLLMBatch(TypedDict):
    """What :class:`DLLMCollator` returns; ``input_lengths`` is the content kept per row."""

    input_ids: Integer[Tensor, "batch seq_len"]
    loss_mask: Float[Tensor, "batch seq_len"]
    attention_mask: Integer[Tensor, "batch seq_len"]
    input_lengths: Integer[Tensor, " batch"]


class DLLMCollator:
    """Collate ``{input_ids, loss_mask, attention_mask}`` lists into block-aligned tensors.

    Args:
        pad_token_id: id of the global padding ``[fill_end, T)``.
        eos_token_id: id of the block fill ``[c, fill_end)``; ``None`` uses ``pad_token_id``.
        block_size: diffusion block size; ``None``, 0 or 1 means no block fill.
        pad_seq_len_divisible: round T up to ``lcm(block_size or 1, pad_seq_len_divisible)``.
        max_seq_len: keep at most this many tokens of a sample (the first ones); T never
            exceeds it.
        supervise_padding: put ``loss_mask = 1`` on the global padding too.
        response_window: align the fill on the response (first supervised token) instead of
            position 0, attend to the fill, and reject samples with several supervised runs.
    """

    def __init__(self, pad_token_id: int = 0, eos_token_id: int | None = None,
                 block_size: int | None = None, pad_seq_len_divisible: int | None = None,
                 max_seq_len: int | None = None, supervise_padding: bool = False,
                 response_window: bool = False) -> None:
        if block_size is not None and block_size < 0:
            raise ValueError(f"DLLMCollator: block_size must be None or >= 0, got {block_size}")
        for name, value in (("pad_seq_len_divisible", pad_seq_len_divisible),
                            ("max_seq_len", max_seq_len)):
            if value is not None and value < 1:
                raise ValueError(f"DLLMCollator: {name} must be None or >= 1, got {value}")
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.block_size = block_size
        self.pad_seq_len_divisible = pad_seq_len_divisible
        self.max_seq_len = max_seq_len
        self.supervise_padding = supervise_padding
        self.response_window = response_window

    @property
    def block_pad_token_id(self) -> int:
        """The id written into the block fill."""
        return self.pad_token_id if self.eos_token_id is None else self.eos_token_id

    @property
    def _fill_block(self) -> int:
        """Block size used for the fill arithmetic; 1 (no fill) when blocks are off."""
        return max(self.block_size or 1, 1)

    def __call__(self, batch: Sequence[Mapping[str, Any]]) -> DLLMBatch:
        """Lay out every sample as content, block fill, global pad (``docs/collator.md``).

        The lists are converted once into flat tensors; regions and the scatter of the kept
        content into the ``[B, T]`` rows are tensor ops over the whole batch.
        """
        sample_lengths = torch.tensor(_checked_lengths(batch), dtype=torch.long)
        content_lengths = (sample_lengths if self.max_seq_len is None
                           else sample_lengths.clamp(max=self.max_seq_len))
        token_sample, token_position = _token_coordinates(sample_lengths)
        input_ids = _flat_values(batch, "input_ids")
        loss_mask = _flat_values(batch, "loss_mask")
        attention_mask = _flat_values(batch, "attention_mask")

        if self.response_window:
            supervised = loss_mask != 0
            _check_single_supervised_run(supervised, token_sample, token_position,
                                         len(batch))
            prefix_lengths = self._first_supervised_index(
                supervised, token_sample, token_position, default=content_lengths)
        else:
            prefix_lengths = torch.zeros_like(content_lengths)
        fill_ends = self._block_fill_ends(content_lengths, prefix_lengths)
        target_len = self._compute_target_length(fill_ends)

        positions = torch.arange(target_len)
        fill_region = ((positions >= content_lengths[:, None])
                       & (positions < fill_ends[:, None]))
        kept = torch.nonzero(token_position < content_lengths[token_sample]).squeeze(1)
        destination = token_sample[kept] * target_len + token_position[kept]
        return DLLMBatch(
            input_ids=self._pad_and_fill(input_ids[kept], destination, fill_region,
                                         pad_value=self.pad_token_id,
                                         fill_value=self.block_pad_token_id),
            loss_mask=self._pad_and_fill(loss_mask[kept], destination, fill_region,
                                         pad_value=float(self.supervise_padding),
                                         fill_value=1.0),
            attention_mask=self._pad_and_fill(attention_mask[kept], destination, fill_region,
                                              pad_value=0,
                                              fill_value=int(self.response_window)),
            input_lengths=content_lengths,
        )

    def _block_fill_ends(self, content_lengths: Integer[Tensor, " batch"],
                         prefix_lengths: Integer[Tensor, " batch"]
                         ) -> Integer[Tensor, " batch"]:
        """End of each row's block fill: the part from ``prefix`` on becomes whole blocks.

        With ``prefix = 0`` (absolute mode) this is ``ceil(c / bs) * bs``; in response-window
        mode ``prefix`` is the response start, so the response is a whole number of blocks.
        """
        block = self._fill_block
        response_lengths = content_lengths - prefix_lengths
        return prefix_lengths + (response_lengths + block - 1) // block * block

    def _compute_target_length(self, fill_ends: Integer[Tensor, " batch"]) -> int:
        """Batch length T: longest fill end, rounded up, never beyond ``max_seq_len``."""
        multiple = 1
        if self.pad_seq_len_divisible is not None:
            multiple = math.lcm(self._fill_block, self.pad_seq_len_divisible)
        longest = int(fill_ends.max())
        target_len = -(-longest // multiple) * multiple
        if self.max_seq_len is not None:
            target_len = min(target_len, self.max_seq_len)
        return target_len

    @staticmethod
    def _first_supervised_index(supervised: Bool[Tensor, " n_tokens"],
                                token_sample: Integer[Tensor, " n_tokens"],
                                token_position: Integer[Tensor, " n_tokens"],
                                default: Integer[Tensor, " batch"]
                                ) -> Integer[Tensor, " batch"]:
        """Per sample, the first supervised position (the response start), capped at
        ``default`` (the kept length): no supervised token means the whole row is prefix."""
        return default.scatter_reduce(0, token_sample[supervised], token_position[supervised],
                                      reduce="amin", include_self=True)

    @staticmethod
    def _pad_and_fill(content: Shaped[Tensor, " n_kept"],
                      destination: Integer[Tensor, " n_kept"],
                      fill_region: Bool[Tensor, "batch seq_len"],
                      pad_value: int | float, fill_value: int | float
                      ) -> Shaped[Tensor, "batch seq_len"]:
        """Rows of ``pad_value``, ``fill_value`` on the fill region, and ``content`` (the kept
        tokens of all samples, concatenated) written at ``destination`` (flat row-major
        offsets) in one scatter."""
        rows = torch.full(fill_region.shape, pad_value, dtype=content.dtype)
        rows.masked_fill_(fill_region, fill_value)
        rows.view(-1).index_copy_(0, destination, content)
        return rows


def _checked_lengths(batch: Sequence[Mapping[str, Any]]) -> list[int]:
    """Each sample's length, after checking it has all keys as lists of one length."""
    if len(batch) == 0:
        raise ValueError("DLLMCollator: empty batch; need at least one sample")
    lengths = []
    for index, sample in enumerate(batch):
        if not isinstance(sample, Mapping):
            raise ValueError(f"DLLMCollator: sample {index} must be a dict with keys "
                             f"{SAMPLE_KEYS}, got {type(sample).__name__}")
        for key in SAMPLE_KEYS:
            if key not in sample:
                raise ValueError(f"DLLMCollator: sample {index} is missing key '{key}' "
                                 f"(each sample needs {', '.join(SAMPLE_KEYS)})")
            if not isinstance(sample[key], (list, tuple)):
                raise ValueError(f"DLLMCollator: sample {index} key '{key}' must be a list, "
                                 f"got {type(sample[key]).__name__}")
        length = len(sample["input_ids"])
        for key in SAMPLE_KEYS[1:]:
            if len(sample[key]) != length:
                raise ValueError(f"DLLMCollator: sample {index} is ragged: key '{key}' has "
                                 f"{len(sample[key])} entries but 'input_ids' has {length}")
        lengths.append(length)
    return lengths


def _token_coordinates(sample_lengths: Integer[Tensor, " batch"]
                       ) -> tuple[Integer[Tensor, " n_tokens"], Integer[Tensor, " n_tokens"]]:
    """For every token of the concatenated samples: its sample index and its position."""
    token_sample = torch.repeat_interleave(torch.arange(len(sample_lengths)), sample_lengths)
    sample_starts = torch.cumsum(sample_lengths, 0) - sample_lengths
    token_position = torch.arange(len(token_sample)) - sample_starts[token_sample]
    return token_sample, token_position


def _flat_values(batch: Sequence[Mapping[str, Any]], key: str) -> Shaped[Tensor, " n_tokens"]:
    """One key's lists of all samples concatenated into a 1-D tensor of the output dtype.

    Goes through ``array.array``: one C-level conversion that rejects wrong element types
    (floats or strings among ids, say) and is several times faster than ``torch.tensor`` on a
    list.
    """
    typecode, dtype, _ = _VALUE_TYPES[key]
    try:
        values = array(typecode, list(chain.from_iterable(sample[key] for sample in batch)))
    except (TypeError, OverflowError) as error:
        raise _bad_value_error(batch, key) from error
    if not values:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(values, dtype=dtype)


def _bad_value_error(batch: Sequence[Mapping[str, Any]], key: str) -> ValueError:
    """A ``ValueError`` naming the first sample and position whose ``key`` value is bad."""
    typecode, _, wanted = _VALUE_TYPES[key]
    for index, sample in enumerate(batch):
        for position, value in enumerate(sample[key]):
            try:
                array(typecode, [value])
            except (TypeError, OverflowError) as error:
                return ValueError(f"DLLMCollator: sample {index} key '{key}' must hold "
                                  f"{wanted}; position {position} is {value!r} ({error})")
    return ValueError(f"DLLMCollator: key '{key}' must hold {wanted}")


def _check_single_supervised_run(supervised: Bool[Tensor, " n_tokens"],
                                 token_sample: Integer[Tensor, " n_tokens"],
                                 token_position: Integer[Tensor, " n_tokens"],
                                 batch_size: int) -> None:
    """Response-window mode handles one response per sample: reject several supervised runs.

    The whole sample is checked, before truncation, so multi-turn data is caught whatever
    ``max_seq_len`` is.
    """
    previous = torch.zeros_like(supervised)
    previous[1:] = supervised[:-1]
    run_starts = supervised & ~(previous & (token_position > 0))
    run_counts = torch.zeros(batch_size, dtype=torch.long).index_add_(
        0, token_sample, run_starts.long())
    offenders = torch.nonzero(run_counts > 1).flatten().tolist()
    if offenders:
        first = offenders[0]
        raise ValueError(
            f"DLLMCollator(response_window=True): sample {first} has "
            f"{int(run_counts[first])} supervised runs in loss_mask (offending samples: "
            f"{offenders}); response-window mode needs one contiguous response per sample "
            f"(single-turn data)")
