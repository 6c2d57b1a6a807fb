"""``model.shift_outputs``: a denoiser reads position j's logits from the final state at j - 1 in
the same document (an autoregressive network's layout), everywhere its logits are read."""

import pytest
import torch

from xdllm.nn import CausalMask, KVCache, RotaryTransformer
from xdllm.nn.factory import denoiser_transformer, rotary_transformer
from xdllm.nn.shifted_outputs import read_from_previous_position
from xdllm_models.arlm.model import causal_rotary_transformer
from xdllm_models.mlm.model import RotaryTransformerMLMModel

VOCAB = 23
SIZES = dict(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_positions=32, attn_backend="sdpa")


def _pair() -> tuple[RotaryTransformer, RotaryTransformer]:
    """A plain and a shifted network with the same weights."""
    torch.manual_seed(0)
    plain = denoiser_transformer(**SIZES)
    shifted = denoiser_transformer(**SIZES, shift_outputs=True)
    shifted.load_state_dict(plain.state_dict())
    return plain, shifted


def test_each_position_reads_the_state_before_it_in_its_own_document():
    hidden = torch.arange(7.0).view(1, 7, 1).expand(2, 7, 1)
    # row 0: two packed documents (positions restart at 0); row 1: left padding, then one document
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2], [0, 0, 0, 1, 2, 3, 4]])
    shifted = read_from_previous_position(hidden, positions)[..., 0]
    assert shifted.tolist() == [[0, 0, 1, 2, 4, 4, 5], [0, 1, 2, 2, 3, 4, 5]]


def test_the_logits_are_the_plain_networks_moved_one_position_right():
    plain, shifted = _pair()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    before, after = plain(ids), shifted(ids)
    torch.testing.assert_close(after[:, 1:], before[:, :-1])
    torch.testing.assert_close(after[:, 0], before[:, 0])


def test_padded_and_packed_rows_shift_inside_each_document_only():
    plain, shifted = _pair()
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.tensor([[False, False, True, True, True, True, True, True], [True] * 8])
    before, after = plain(ids, attention_mask=attention_mask), shifted(ids, attention_mask=attention_mask)
    torch.testing.assert_close(after[0, 3:], before[0, 2:-1])  # the first real token (column 2) keeps its own
    torch.testing.assert_close(after[0, :3], before[0, :3])
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, -1], [0, 0, 0, 0, 0, 1, 1, 1]])
    before, after = plain(ids, segment_ids=segments), shifted(ids, segment_ids=segments)
    starts = torch.tensor([[True, False, False, True, False, False, False, True],
                           [True, False, False, False, False, True, False, False]])
    torch.testing.assert_close(after[starts], before[starts])
    torch.testing.assert_close(after[:, 1:][~starts[:, 1:]], before[:, :-1][~starts[:, 1:]])


def test_final_hidden_is_shifted_as_the_logits_are_and_block_states_are_not():
    plain, shifted = _pair()
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(shifted.final_hidden(ids) @ shifted.lm_head_weight.T, shifted(ids))
    assert not torch.allclose(shifted.final_hidden(ids), plain.final_hidden(ids))
    torch.testing.assert_close(shifted(ids, output_hidden_states=[0, 1]).hidden_states,
                               plain(ids, output_hidden_states=[0, 1]).hidden_states)


def test_an_autoregressive_networks_next_token_predictions_land_on_the_token_they_predict():
    torch.manual_seed(4)
    arlm = causal_rotary_transformer(**SIZES)
    denoiser = denoiser_transformer(**SIZES, shift_outputs=True)
    denoiser.load_state_dict(arlm.state_dict())
    ids = torch.randint(0, VOCAB, (3, 7), generator=torch.Generator().manual_seed(5))
    next_token = arlm(ids)  # [:, j] predicts ids[:, j + 1]
    read_causally = denoiser(ids, mask_rule=CausalMask())  # [:, j] predicts ids[:, j]
    torch.testing.assert_close(read_causally[:, 1:], next_token[:, :-1])


def test_a_kv_cache_is_refused_unless_the_caller_takes_the_unshifted_states():
    plain, shifted = _pair()
    cache = KVCache(2, 1, 2, 8, 8, dtype=torch.float32, device=torch.device("cpu"))
    ids, positions = torch.tensor([[3, 4]]), torch.tensor([[0, 1]])
    with pytest.raises(ValueError, match="shift_outputs=True cannot run on a KV cache: the first new token's output"):
        shifted(ids, positions=positions, mask_rule=CausalMask(), kv_cache=cache)
    own = shifted.final_hidden(ids, positions=positions, mask_rule=CausalMask(), kv_cache=cache, unshifted=True)
    torch.testing.assert_close(own, plain.final_hidden(ids, positions=positions, mask_rule=CausalMask()))
    assert cache.length == 2
    full = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(shifted.final_hidden(full, unshifted=True), plain.final_hidden(full))


def test_the_option_reaches_the_network_and_only_the_denoiser_factory_takes_it():
    assert denoiser_transformer(**SIZES, shift_outputs=True).shifts_outputs
    assert not denoiser_transformer(**SIZES).shifts_outputs
    assert not rotary_transformer(**SIZES).shifts_outputs
    with pytest.raises(TypeError):
        rotary_transformer(**SIZES, shift_outputs=True)
    assert RotaryTransformerMLMModel(VOCAB, d_model=16, n_layers=1, n_heads=2, shift_outputs=True).shifts_outputs
    assert not RotaryTransformerMLMModel(VOCAB, d_model=16, n_layers=1, n_heads=2).shifts_outputs
