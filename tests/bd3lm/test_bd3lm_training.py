"""BD3-LM training: block-aligned rows, per-block noise, the [x_t | x_0] mask and the loss."""

import pytest
import torch
from bd3lm_helpers import examples, random_network

from xdllm.losses.token_nll import per_token_nll
from xdllm.nn import BlockDiffusionMask
from xdllm_models.bd3lm.collator import BD3LMCollator, PackedBD3LMCollator
from xdllm_models.bd3lm.loss import BD3LMLoss
from xdllm_models.bd3lm.noise import corrupt_uniform_per_block
from xdllm_models.bd3lm.two_stream import denoising_logits

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], []]
TARGETS = [[14, 15, 16, 17, 18], [6, 7, 8], [9], [10, 11, 12, 13, 14, 15, 16, 17, 18]]


def _batch(tokenizer, block_size=4, **options):
    return BD3LMCollator(tokenizer, block_size, seed=3, **options)(examples(PROMPTS, TARGETS))


def _block_diffusion_tokens(batch, block_size):
    document = torch.where(batch["attention_mask"], 0, -1)
    both = torch.cat([document, document], 1), torch.cat([batch["positions"], batch["positions"]], 1)
    return BlockDiffusionMask(block_size).tokens(*both)


def test_rows_start_every_response_at_a_block_boundary(tokenizer):
    batch = _batch(tokenizer, block_size=4)
    width = batch["input_ids"].shape[1]
    assert width % 4 == 0 and torch.equal(batch["positions"], torch.arange(width).expand(4, width))
    for row, (prompt, target) in enumerate(zip(PROMPTS, TARGETS)):
        start = int(batch["loss_mask"][row].nonzero()[0])
        assert start % 4 == 0                                          # the response starts a block
        real = batch["attention_mask"][row].nonzero().flatten()
        assert batch["target_ids"][row, real].tolist()[: start - int(real[0])] == [tokenizer.bos_token_id, *prompt]
        response = batch["target_ids"][row, start:int(real[-1]) + 1].tolist()
        assert len(response) % 4 == 0 and response[: len(target) + 1] == [*target, tokenizer.eos_token_id]
        assert set(response[len(target):]) == {tokenizer.eos_token_id}  # supervised EOS fill
    corrupted = batch["input_ids"] != batch["target_ids"]
    assert torch.equal(corrupted, batch["noise_mask"]) and not (corrupted & ~batch["loss_mask"]).any()
    assert (batch["input_ids"][corrupted] == tokenizer.mask_token_id).all()


def test_noise_has_one_level_per_block_inside_the_clipped_range(tokenizer):
    batch = _batch(tokenizer, block_size=4, noise_low=0.3, noise_high=0.6)
    levels = batch["p_mask"][batch["loss_mask"]]
    assert ((levels >= 0.3) & (levels < 0.6)).all()
    blocks = batch["p_mask"].view(4, -1, 4)
    supervised = batch["loss_mask"].view(4, -1, 4)
    assert torch.equal(torch.where(supervised, blocks, blocks[..., :1]), blocks.expand_as(blocks))
    ids = torch.arange(4000).view(1, 4000) % 50 + 4
    _, noise, p_mask = corrupt_uniform_per_block(ids, None, 1, block_size=40, low=0.3, high=0.6,
                                                 generator=torch.Generator().manual_seed(0))
    per_block = noise.view(100, 40).float().mean(1)
    assert (per_block - p_mask.view(100, 40)[:, 0]).abs().mean() < 0.1  # masked share follows the level


def test_noise_does_not_depend_on_the_batch_or_the_prompt(tokenizer):
    collator = BD3LMCollator(tokenizer, 4, seed=3, noise="blockwise")
    together = collator(examples(PROMPTS, TARGETS))
    alone = collator(examples([[4, 5, 6, 7, 8, 9, 10]], [TARGETS[2]], first_index=2))  # other prompt
    mask_together = together["noise_mask"][2][together["loss_mask"][2]]
    assert torch.equal(mask_together, alone["noise_mask"][0][alone["loss_mask"][0]])


def test_blockwise_clipping_from_above_is_refused(tokenizer):
    with pytest.raises(ValueError, match="cannot clip"):
        BD3LMCollator(tokenizer, 4, noise="blockwise", noise_high=0.8)


def test_no_position_attends_to_a_later_block(tokenizer):
    block_size = 4
    batch = _batch(tokenizer, block_size)
    tokens = _block_diffusion_tokens(batch, block_size)
    allowed = BlockDiffusionMask(block_size).dense(tokens, tokens)[:, 0]
    query_block = (tokens.position // block_size)[:, :, None]
    key_block = (tokens.position // block_size)[:, None, :]
    real = (tokens.document >= 0)
    pairs = allowed & real[:, :, None] & real[:, None, :]
    assert not (pairs & (key_block > query_block)).any()                 # never a later block
    noisy_query, clean_key = ~tokens.clean[:, :, None], tokens.clean[:, None, :]
    assert not (pairs & noisy_query & clean_key & (key_block == query_block)).any()  # never its own x_0
    assert not (pairs & ~noisy_query & ~clean_key).any()                 # clean tokens never see noise
    assert (pairs & noisy_query & clean_key & (key_block < query_block)).any()


def test_logits_of_a_block_ignore_everything_from_later_blocks(tokenizer, network):
    block_size = 4
    batch = _batch(tokenizer, block_size)
    noisy, clean = batch["input_ids"], batch["target_ids"]
    reference = denoising_logits(network, noisy, clean, block_size, batch["attention_mask"], batch["positions"])
    for block in range(noisy.shape[1] // block_size):
        later = torch.arange(noisy.shape[1]) >= (block + 1) * block_size
        scrambled_noisy = torch.where(later, (noisy + 5) % tokenizer.vocab_size, noisy)
        scrambled_clean = torch.where(later, (clean + 7) % tokenizer.vocab_size, clean)
        logits = denoising_logits(network, scrambled_noisy, scrambled_clean, block_size,
                                  batch["attention_mask"], batch["positions"])
        here = slice(block * block_size, (block + 1) * block_size)
        real = batch["attention_mask"][:, here]
        torch.testing.assert_close(logits[:, here][real], reference[:, here][real], atol=1e-5, rtol=1e-5)


def test_one_block_per_sequence_is_plain_bidirectional_attention(tokenizer, network):
    clean = torch.randint(4, tokenizer.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    noisy = torch.where(torch.rand(2, 16, generator=torch.Generator().manual_seed(1)) < 0.5,
                        tokenizer.mask_token_id, clean)
    positions = torch.arange(16).expand(2, 16)
    tokens = BlockDiffusionMask(16).tokens(torch.zeros(2, 32, dtype=torch.long), torch.cat([positions] * 2, 1))
    allowed = BlockDiffusionMask(16).dense(tokens, tokens)[:, 0]
    assert allowed[:, :16, :16].all() and not allowed[:, :16, 16:].any()  # x_t sees all of x_t, no x_0
    two_stream = denoising_logits(network, noisy, clean, 16, positions=positions)
    torch.testing.assert_close(two_stream, network(noisy), atol=1e-5, rtol=1e-5)  # the default rule


def test_nelbo_and_flat_objectives(tokenizer, network):
    batch = _batch(tokenizer, block_size=4)
    logits = denoising_logits(network, batch["input_ids"], batch["target_ids"], 4,
                              batch["attention_mask"], batch["positions"])
    nll = per_token_nll(logits.float(), batch["target_ids"])
    masked = batch["noise_mask"] & batch["loss_mask"]
    nelbo = BD3LMLoss(4)(network, batch)
    expected = (nll / batch["p_mask"])[masked].sum() / batch["loss_mask"].sum()
    torch.testing.assert_close(nelbo["loss"], expected)
    flat = BD3LMLoss(4, objective="flat")(network, batch)
    torch.testing.assert_close(flat["loss"], nll[masked].mean())
    assert BD3LMLoss(4, "flat").token_counts(batch)["num_masked_tokens"] == masked.sum()


def test_packed_rows_give_the_loss_of_padded_rows(tokenizer):
    network = random_network(tokenizer.vocab_size, max_positions=64)
    options = dict(seed=5, noise="blockwise", max_positions=64)
    padded = BD3LMCollator(tokenizer, 4, **options)(examples(PROMPTS, TARGETS))
    packed = PackedBD3LMCollator(tokenizer, 4, row_length=24, **options)(examples(PROMPTS, TARGETS))
    assert "attention_mask" not in packed and packed["input_ids"].shape[1] == 24
    assert packed["noise_mask"].sum() == padded["noise_mask"].sum()
    loss = BD3LMLoss(4)
    torch.testing.assert_close(loss(network, packed)["loss"], loss(network, padded)["loss"], atol=1e-5, rtol=1e-5)


def test_packed_chunks_keep_their_document_positions(tokenizer):
    collator = PackedBD3LMCollator(tokenizer, 4, row_length=8, seed=0)
    batch = collator(examples([[4, 5]], [[6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]))  # 3 + 12 tokens: two chunks
    positions = batch["positions"][batch["segment_ids"] >= 0]
    assert sorted(positions.tolist()) == list(range(1, 16))  # offset 1: the response starts at 4


def test_a_document_beyond_the_position_limit_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="max_positions=8"):
        BD3LMCollator(tokenizer, 4, max_positions=8)(examples([[4, 5, 6]], [[7, 8, 9, 10, 11]]))


def test_training_reduces_the_loss(tokenizer):
    torch.manual_seed(0)
    network = random_network(tokenizer.vocab_size).train()
    with torch.no_grad():
        for parameter in network.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.02)
    batch = _batch(tokenizer, block_size=4)
    loss = BD3LMLoss(4)
    optimizer = torch.optim.AdamW(network.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        value = loss(network, batch)["loss"]
        first = first if first is not None else float(value.detach())
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    assert float(value.detach()) < 0.5 * first
