"""Incremental decoding with a KV cache equals recomputing the whole prefix at every step."""

import pytest
import torch

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig
from xdllm.nn.masks import BlockCausalMask, BlockDiffusionMask, CausalMask, DocumentMask, StalePrefixMask, Tokens

VOCAB = 37
PROMPT_LENGTHS = (3, 7, 5)


def make_model() -> RotaryTransformer:
    torch.manual_seed(0)
    config = RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_positions=64,
                                     attn_backend="sdpa")
    return RotaryTransformer(config).eval()


def left_padded_prompts(block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts of different lengths, left-padded to one width: ids, attention mask, positions.

    Each prompt's positions start where it ends on a block boundary (RoPE sees only offsets), so
    every later forward appends whole blocks to every row. Padding sits at position 0.
    """
    torch.manual_seed(1)
    width = max(PROMPT_LENGTHS)
    ids = torch.randint(0, VOCAB, (len(PROMPT_LENGTHS), width))
    real = torch.zeros(len(PROMPT_LENGTHS), width, dtype=torch.bool)
    positions = torch.zeros(len(PROMPT_LENGTHS), width, dtype=torch.long)
    for row, length in enumerate(PROMPT_LENGTHS):
        real[row, width - length:] = True
        positions[row, width - length:] = (-length) % block_size + torch.arange(length)
    return ids, real, positions


def cached_and_recomputed_logits(rule, block_size: int, steps: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Prefill, then ``steps`` forwards of ``block_size`` new tokens each with the cache.

    Pairs (incremental logits, the same tokens' logits from a full recompute): one per forward,
    then (all incremental logits concatenated, the last full recompute).
    """
    model = make_model()
    ids, real, positions = left_padded_prompts(block_size)
    cache = model.new_kv_cache(len(PROMPT_LENGTHS), max_len=ids.shape[1] + steps * block_size)
    with torch.no_grad():
        incremental = [model(ids, attention_mask=real, positions=positions, mask_rule=rule, kv_cache=cache)]
        pairs = [(incremental[0], model(ids, attention_mask=real, positions=positions, mask_rule=rule))]
        for _ in range(steps):
            new_ids = torch.randint(0, VOCAB, (len(PROMPT_LENGTHS), block_size))
            new_positions = positions[:, -1:] + 1 + torch.arange(block_size)
            incremental.append(model(new_ids, positions=new_positions, mask_rule=rule, kv_cache=cache))
            ids, positions = torch.cat([ids, new_ids], 1), torch.cat([positions, new_positions], 1)
            real = torch.cat([real, torch.ones_like(new_ids, dtype=torch.bool)], 1)
            full = model(ids, attention_mask=real, positions=positions, mask_rule=rule)
            pairs.append((incremental[-1], full[:, -block_size:]))
    assert cache.length == ids.shape[1]
    return pairs + [(torch.cat(incremental, dim=1), full)]


@pytest.mark.parametrize("block_size", [1, 2, 4])
@pytest.mark.parametrize("rule_name", ["causal", "block_causal"])
def test_cached_decoding_equals_full_recomputation(rule_name, block_size):
    rule = CausalMask() if rule_name == "causal" else BlockCausalMask(block_size)
    for incremental, recomputed in cached_and_recomputed_logits(rule, block_size):
        torch.testing.assert_close(incremental, recomputed, atol=1e-5, rtol=0)


def test_block_causal_rule_matters_when_decoding_blocks():
    """Guards the test above: block-causal and causal logits of a new block differ."""
    block_causal = cached_and_recomputed_logits(BlockCausalMask(4), 4)[1][0]
    causal = cached_and_recomputed_logits(CausalMask(), 4)[1][0]
    assert (block_causal - causal).abs().max() > 1e-4


def test_reading_the_cache_leaves_it_unchanged_until_a_block_is_written():
    model = make_model()
    rule = BlockCausalMask(2)
    ids, real, positions = left_padded_prompts(2)
    cache = model.new_kv_cache(len(PROMPT_LENGTHS), max_len=ids.shape[1] + 2)
    block = torch.randint(0, VOCAB, (len(PROMPT_LENGTHS), 2))
    block_positions = positions[:, -1:] + 1 + torch.arange(2)
    with torch.no_grad():
        model(ids, attention_mask=real, positions=positions, mask_rule=rule, kv_cache=cache)
        read = model(block, positions=block_positions, mask_rule=rule, kv_cache=cache, write_cache=False,
                     output_hidden_states=(1,))
        model(torch.randint(0, VOCAB, block.shape), positions=block_positions, mask_rule=rule, kv_cache=cache,
              write_cache=False)  # another denoising pass over the same block, never committed
        assert cache.length == ids.shape[1]
        written = model(block, positions=block_positions, mask_rule=rule, kv_cache=cache)
        assert cache.length == ids.shape[1] + 2
        full = model(torch.cat([ids, block], 1), attention_mask=torch.cat([real, torch.ones_like(block) > 0], 1),
                     positions=torch.cat([positions, block_positions], 1), mask_rule=rule, output_hidden_states=(1,))
    torch.testing.assert_close(read.logits, written, atol=1e-6, rtol=0)
    torch.testing.assert_close(written, full.logits[:, -2:], atol=1e-5, rtol=0)
    torch.testing.assert_close(read.hidden_states[0], full.hidden_states[0][:, -2:], atol=1e-5, rtol=0)


def test_cache_misuse_is_refused_with_the_reason():
    model = make_model()
    cache = model.new_kv_cache(1, max_len=4)
    ids, positions = torch.zeros(1, 3, dtype=torch.long), torch.arange(3)[None]
    for rule in (None, DocumentMask(), BlockDiffusionMask(2)):
        with pytest.raises(ValueError, match="decodes with a cache"):
            model(ids, positions=positions, mask_rule=rule, kv_cache=cache)
    with pytest.raises(ValueError, match="explicit positions"):
        model(ids, mask_rule=CausalMask(), kv_cache=cache)
    with torch.no_grad():
        model(ids, positions=positions, mask_rule=CausalMask(), kv_cache=cache)
        with pytest.raises(ValueError, match="exceed max_len=4"):
            model(ids, positions=positions + 3, mask_rule=CausalMask(), kv_cache=cache)
        with pytest.raises(ValueError, match="batch of 2 rows"):
            model(ids.repeat(2, 1)[:, :1], positions=positions.repeat(2, 1)[:, :1], mask_rule=CausalMask(),
                  kv_cache=cache)
    cache.reset()
    assert cache.length == 0


def test_under_autocast_the_cache_holds_the_compute_dtype_and_still_matches_recomputation():
    """Keys and values leave the projections in autocast's dtype; a float32 cache would be cast
    whole back to bf16 by every attention call (twice the memory, a copy per layer per step)."""
    model = make_model()
    assert model.new_kv_cache(1, max_len=4).keys[0].dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.new_kv_cache(1, max_len=4).keys[0].dtype == torch.bfloat16
        assert model.new_kv_cache(1, max_len=4, dtype=torch.float32).keys[0].dtype == torch.float32
        for incremental, recomputed in cached_and_recomputed_logits(CausalMask(), 2):
            torch.testing.assert_close(incremental.float(), recomputed.float(), atol=3e-2, rtol=0)


def test_a_reading_pass_attends_to_a_view_of_the_cache_not_a_copy_of_the_prefix():
    """A read-only layer (``write_cache=False``) gets its keys and values as views of the cache's
    buffers (the new block in the free slots after the prefix), never a concatenated copy of the
    whole prefix; the prefix and the fill length are left as they were."""
    model = make_model()
    cache = model.new_kv_cache(2, max_len=6)
    positions = torch.arange(3)[None].repeat(2, 1)
    cache.append(Tokens(torch.zeros_like(positions), positions))
    for buffer in cache.keys + cache.values:
        buffer[:, :, :3] = torch.randn(2, 4, 3, 8)
    prefix = [buffer[:, :, :3].clone() for buffer in cache.keys + cache.values]
    key, value = torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8)
    keys, values = cache.layer(0).extend(key, value)
    assert keys.data_ptr() == cache.keys[0].data_ptr() and values.data_ptr() == cache.values[0].data_ptr()
    assert torch.equal(keys[:, :, :3], prefix[0]) and torch.equal(keys[:, :, 3:], key)
    assert torch.equal(values[:, :, 3:], value)
    assert cache.length == 3 and torch.equal(cache.position[:, :3], positions)
    for buffer, before in zip(cache.keys + cache.values, prefix):
        assert torch.equal(buffer[:, :, :3], before)


def test_a_kept_prefix_and_suffix_around_a_gap_give_the_full_forward_when_nothing_changed():
    """The dual cache's mechanics (``truncate(start, keep_from=stop)``): a reading forward of the
    columns in the gap attends to the kept prefix, to itself and to the kept suffix, in canvas
    order; with the same tokens everywhere that is the full bidirectional forward. A forward that
    would leave a gap before the suffix, or append over it, is refused."""
    model = make_model()
    ids, real, positions = left_padded_prompts(block_size=1)
    rule = StalePrefixMask()
    cache = model.new_kv_cache(len(PROMPT_LENGTHS), max_len=ids.shape[1])
    with torch.no_grad():
        full = model(ids, attention_mask=real, positions=positions, mask_rule=rule, kv_cache=cache)
        torch.testing.assert_close(full, model(ids, attention_mask=real, positions=positions), atol=1e-5, rtol=0)
        cache.truncate(3, keep_from=5)
        gap = model(ids[:, 3:5], attention_mask=real[:, 3:5], positions=positions[:, 3:5], mask_rule=rule,
                    kv_cache=cache, write_cache=False)
        torch.testing.assert_close(gap, full[:, 3:5], atol=1e-5, rtol=0)
        assert cache.length == 3 and cache.suffix == (5, ids.shape[1])
        with pytest.raises(ValueError, match="must fill slots 3..5 exactly"):
            model(ids[:, 3:4], attention_mask=real[:, 3:4], positions=positions[:, 3:4], mask_rule=rule,
                  kv_cache=cache, write_cache=False)
        with pytest.raises(ValueError, match="keeps a suffix"):
            model(ids[:, 3:5], attention_mask=real[:, 3:5], positions=positions[:, 3:5], mask_rule=rule,
                  kv_cache=cache)
    with pytest.raises(ValueError, match=f"keep_from 2 is outside 3..{ids.shape[1]}"):
        cache.truncate(3, keep_from=2)
    cache.truncate(4, keep_from=6)  # another gap in the same fill: the slots the last append filled
    assert cache.length == 4 and cache.suffix == (6, ids.shape[1])
    with pytest.raises(ValueError, match=f"length {ids.shape[1] + 1} is outside 0..{ids.shape[1]}"):
        cache.truncate(ids.shape[1] + 1)
    cache.reset()
    assert cache.length == 0 and cache.suffix is None


def test_write_only_keeps_the_other_slots_and_rows_run_apart():
    """``write_only``: a forward writes the new keys of the marked slots only (per row), the
    others keep theirs; ``take_rows`` copies the rows asked for (in that order, with the fill),
    ``put_rows`` writes them back."""
    model = make_model()
    ids, real, positions = left_padded_prompts(block_size=1)
    rule = StalePrefixMask()
    cache = model.new_kv_cache(len(PROMPT_LENGTHS), max_len=ids.shape[1])
    with torch.no_grad():
        model(ids, attention_mask=real, positions=positions, mask_rule=rule, kv_cache=cache)
        before = [keys.clone() for keys in cache.keys]
        changed = ids.clone()
        changed[:, 3:5] = (changed[:, 3:5] + 1) % 7 + 1
        cache.truncate(3, keep_from=5)
        cache.write_only = torch.zeros((ids.shape[0], 2), dtype=torch.bool)
        cache.write_only[0] = True  # row 0 writes its new keys, the other rows keep theirs
        model(changed[:, 3:5], attention_mask=real[:, 3:5], positions=positions[:, 3:5], mask_rule=rule,
              kv_cache=cache, write_cache=False)
        cache.write_only = None
        for old, new in zip(before, cache.keys):
            assert not torch.equal(new[0, :, 3:5], old[0, :, 3:5]) and torch.equal(new[1:], old[1:])
        taken = cache.take_rows(torch.tensor([2, 0]))
        assert taken.batch_size == 2 and taken.length == 3 and taken.suffix == (5, ids.shape[1])
        assert torch.equal(taken.keys[0][0], before[0][2]) and torch.equal(taken.keys[0][1], cache.keys[0][0])
        taken.reset()  # rows 2 and 0 refresh apart from row 1: a full forward of their changed canvases
        model(changed[[2, 0]], attention_mask=real[[2, 0]], positions=positions[[2, 0]], mask_rule=rule,
              kv_cache=taken)
        cache.put_rows(torch.tensor([2, 0]), taken)
    assert cache.length == ids.shape[1] and cache.suffix is None
    assert torch.equal(cache.keys[0][2], taken.keys[0][0]) and not torch.equal(cache.keys[0][2], before[0][2])
    assert torch.equal(cache.keys[0][0], taken.keys[0][1])
    assert torch.equal(cache.keys[0][1], before[0][1])  # row 1 was not taken
