"""Exact match and token accuracy of output regions, by hand."""

import torch

from xdllm.predict.metrics import match_output_regions, reference_lengths

EOS, PAD = 3, 0


def test_reference_length_runs_through_eos_or_up_to_pad():
    targets = torch.tensor([[5, 6, EOS, PAD], [5, PAD, PAD, PAD], [5, 6, 7, 8], [EOS, 5, 5, PAD]])
    assert reference_lengths(targets, EOS, PAD).tolist() == [3, 1, 4, 1]


def test_match_counts_tokens_until_eos_and_ignores_what_follows():
    ids = torch.tensor([
        [2, 9, 5, 6, EOS, 7],     # output from 2: exact through eos, junk after is ignored
        [2, 5, 7, EOS, PAD, PAD],  # output from 1: second token wrong
        [2, 9, 9, 9, 5, 6],       # output from 4: runs off the canvas after two tokens
    ])
    starts = torch.tensor([2, 1, 4])
    targets = torch.tensor([[5, 6, EOS, PAD], [5, 6, EOS, PAD], [5, 6, EOS, PAD]])
    match = match_output_regions(ids, starts, targets, EOS, PAD)
    assert match.correct.tolist() == [3, 2, 2]
    assert match.length.tolist() == [3, 3, 3]
    assert match.exact.tolist() == [True, False, False]
    assert match.token_accuracy == 7 / 9
    assert abs(match.exact_match - 1 / 3) < 1e-9
