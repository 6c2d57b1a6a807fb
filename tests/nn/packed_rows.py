"""Random packed rows for the mask and model tests: documents of random lengths, then padding."""

import torch

from xdllm.nn.attention import PAD_DOCUMENT_ID


def random_packed_rows(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``segment_ids`` (padding: PAD_DOCUMENT_ID) and ``attention_mask`` (True on real tokens) of
    rows packed with documents of 1 to 5 tokens; odd rows are left-padded, even rows right-padded."""
    generator = torch.Generator().manual_seed(seed)
    segments = torch.full((batch, length), PAD_DOCUMENT_ID)
    for row in range(batch):
        start, document = 0, 0
        filled = int(torch.randint(length // 2, length + 1, (1,), generator=generator))
        while start < filled:
            size = min(int(torch.randint(1, 6, (1,), generator=generator)), filled - start)
            segments[row, start:start + size] = document
            start, document = start + size, document + 1
        if row % 2 == 1:
            segments[row] = segments[row].roll(length - filled)
    return segments, segments != PAD_DOCUMENT_ID
