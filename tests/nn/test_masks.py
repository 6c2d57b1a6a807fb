"""Mask rules: hand-written cases pin the semantics; random packed and padded rows check the
dense SDPA mask against a pairwise reference and against FlexAttention's own evaluation."""

from typing import no_type_check

import pytest
import torch
from packed_rows import random_packed_rows
from torch.nn.attention.flex_attention import create_block_mask

from xdllm.nn.attention import PAD_DOCUMENT_ID, document_ids_for
from xdllm.nn.masks import (
    AnnealedCausalMask,
    BlockCausalMask,
    BlockDiffusionMask,
    CausalMask,
    DocumentMask,
    MaskRule,
    Tokens,
)
from xdllm.nn.transformer import default_positions

RULES = [DocumentMask(), CausalMask(), BlockCausalMask(1), BlockCausalMask(2), BlockCausalMask(3),
         BlockDiffusionMask(1), BlockDiffusionMask(2), BlockDiffusionMask(3),
         AnnealedCausalMask(torch.tensor(0.4), torch.tensor(3)),
         AnnealedCausalMask(torch.tensor(0.9), torch.tensor(11))]


def reference_pair_draw(salt: int, query_position: int, key_position: int) -> int:
    """The annealed rule's hash in Python integers (unbounded, masked to 32 bits as it goes)."""
    x = (salt * 0x27D4EB2F + query_position * 0x165667B1 + key_position * 0x61C88647) % 2**32
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) % 2**32
    x = ((x ^ (x >> 12)) * 0x297A2D39) % 2**32
    return (x ^ (x >> 15)) % 2**24


def random_rows(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Document ids and positions of random packed, padded rows."""
    segments, real = random_packed_rows(batch, length, seed)
    return document_ids_for(real, segments), default_positions(length, real, segments, torch.device("cpu"))


def row_tokens(rule: MaskRule, documents: torch.Tensor, positions: torch.Tensor):
    """The rule's tokens for a plain row, or for ``[x_t | x_0]`` (both halves alike) under block diffusion."""
    if isinstance(rule, BlockDiffusionMask):
        documents, positions = documents.repeat(1, 2), positions.repeat(1, 2)
    return rule.tokens(documents, positions)


def reference_allows(rule: MaskRule, query: dict, key: dict) -> bool:
    """Each rule's definition, one (query, key) pair of plain ints at a time."""
    if query["document"] != key["document"]:
        return False
    if isinstance(rule, DocumentMask):
        return True
    if isinstance(rule, CausalMask):
        return key["position"] <= query["position"]
    if isinstance(rule, AnnealedCausalMask):
        draw = reference_pair_draw(int(rule.salt), query["position"], key["position"])
        return key["position"] <= query["position"] or draw < float(rule.visible) * 2**24
    query_block, key_block = query["position"] // rule.block_size, key["position"] // rule.block_size
    if isinstance(rule, BlockCausalMask):
        return key_block <= query_block
    if query["clean"]:
        return key["clean"] and key_block <= query_block
    return key_block < query_block if key["clean"] else key_block == query_block


def token_at(tokens, row: int, index: int) -> dict:
    return {name: int(value[row, index]) for name, value in tokens._asdict().items()}


def dense_of(rule: MaskRule, tokens) -> torch.Tensor:
    return rule.dense(tokens, tokens)[:, 0]


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_dense_mask_matches_the_rule_definition_pair_by_pair(rule):
    for seed in range(3):
        tokens = row_tokens(rule, *random_rows(3, 10, seed))
        dense = dense_of(rule, tokens)
        batch, length = tokens.document.shape
        for row in range(batch):
            for q in range(length):
                for k in range(length):
                    expected = reference_allows(rule, token_at(tokens, row, q), token_at(tokens, row, k))
                    assert bool(dense[row, q, k]) == expected, (rule, seed, row, q, k)


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_flex_evaluation_of_the_mask_mod_equals_the_dense_mask(rule):
    """create_block_mask with one-token blocks evaluates mask_mod through vmap, token by token."""
    tokens = row_tokens(rule, *random_rows(3, 10, seed=7))
    batch, length = tokens.document.shape
    flex = create_block_mask(rule.mask_mod(tokens, tokens), B=batch, H=None, Q_LEN=length, KV_LEN=length,
                             device="cpu", BLOCK_SIZE=1)
    assert torch.equal(flex.to_dense()[:, 0].bool(), dense_of(rule, tokens))
    assert rule.block_mask(tokens, tokens).shape == (batch, 1, length, length)


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_every_token_sees_itself_so_no_row_is_empty(rule):
    tokens = row_tokens(rule, *random_rows(4, 12, seed=3))
    assert dense_of(rule, tokens).diagonal(dim1=1, dim2=2).all()


def test_causal_by_hand_with_two_documents_and_padding():
    tokens = Tokens(torch.tensor([[0, 0, 0, 1, 1, -1]]), torch.tensor([[0, 1, 2, 0, 1, 0]]))
    expected = torch.tensor([[1, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0],
                             [0, 0, 0, 1, 0, 0],
                             [0, 0, 0, 1, 1, 0],
                             [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(dense_of(CausalMask(), tokens)[0], expected)


def test_block_causal_by_hand_blocks_start_at_each_document():
    # documents of 3 and 3 tokens, block_size 2: blocks {0,1} {2} | {0,1} {2}
    tokens = Tokens(torch.tensor([[0, 0, 0, 1, 1, 1]]), torch.tensor([[0, 1, 2, 0, 1, 2]]))
    expected = torch.tensor([[1, 1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0],
                             [0, 0, 0, 1, 1, 0],
                             [0, 0, 0, 1, 1, 0],
                             [0, 0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(dense_of(BlockCausalMask(2), tokens)[0], expected)


def test_block_diffusion_by_hand_one_document():
    # N = 4, block_size 2: row [x_t blocks 0 0 1 1 | x_0 blocks 0 0 1 1]
    rule = BlockDiffusionMask(2)
    tokens = rule.tokens(torch.zeros(1, 8, dtype=torch.long), torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]))
    #                        x_t          x_0
    expected = torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0],   # x_t block 0: its noisy block
                             [1, 1, 0, 0, 0, 0, 0, 0],
                             [0, 0, 1, 1, 1, 1, 0, 0],   # x_t block 1: its noisy block + clean block 0
                             [0, 0, 1, 1, 1, 1, 0, 0],
                             [0, 0, 0, 0, 1, 1, 0, 0],   # x_0 block 0: clean block 0
                             [0, 0, 0, 0, 1, 1, 0, 0],
                             [0, 0, 0, 0, 1, 1, 1, 1],   # x_0 block 1: clean blocks 0 and 1
                             [0, 0, 0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(dense_of(rule, tokens)[0], expected)


def test_block_diffusion_by_hand_packed_documents_and_padding():
    # x_t = [a0 a1 a2 | b0 | pad], block_size 2: document a has blocks {0,1} {2}, b has {0}
    rule = BlockDiffusionMask(2)
    documents, positions = torch.tensor([[0, 0, 0, 1, -1]]), torch.tensor([[0, 1, 2, 0, 0]])
    tokens = rule.tokens(documents.repeat(1, 2), positions.repeat(1, 2))
    #                        a0 a1 a2 b0 p | a0 a1 a2 b0 p
    expected = torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                             [0, 0, 1, 0, 0, 1, 1, 0, 0, 0],
                             [0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
                             [0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
                             [0, 0, 0, 0, 0, 1, 1, 0, 0, 0],
                             [0, 0, 0, 0, 0, 1, 1, 0, 0, 0],
                             [0, 0, 0, 0, 0, 1, 1, 1, 0, 0],
                             [0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
                             [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(dense_of(rule, tokens)[0], expected)


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_no_noisy_token_sees_a_later_block_or_its_own_block_clean(block_size):
    rule = BlockDiffusionMask(block_size)
    for seed in range(5):
        tokens = row_tokens(rule, *random_rows(3, 16, seed))
        dense = dense_of(rule, tokens)
        block = tokens.position // block_size
        query_block, key_block = block[:, :, None], block[:, None, :]
        noisy_query, clean_key = ~tokens.clean[:, :, None], tokens.clean[:, None, :]
        assert not (dense & noisy_query & (key_block > query_block)).any()
        assert not (dense & noisy_query & clean_key & (key_block >= query_block)).any()
        assert not (dense & tokens.clean[:, :, None] & ~clean_key).any()  # clean never sees noisy


def test_rules_refuse_bad_arguments():
    with pytest.raises(ValueError, match="block_size"):
        BlockCausalMask(0)
    with pytest.raises(ValueError, match="block_size"):
        BlockDiffusionMask(0)
    with pytest.raises(ValueError, match="even length"):
        BlockDiffusionMask(2).tokens(torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 5, dtype=torch.long))


def test_a_rule_without_no_type_check_is_refused_at_definition():
    with pytest.raises(TypeError, match="no_type_check"):
        class Unmarked(MaskRule):
            def allows(self, query, key):
                return query.document == key.document

    class Marked(MaskRule):
        @no_type_check
        def allows(self, query, key):
            return query.document == key.document

    tokens = Tokens(torch.tensor([[0, 1]]), torch.tensor([[0, 0]]))
    assert torch.equal(Marked().dense(tokens, tokens)[0, 0], torch.eye(2, dtype=torch.bool))


def test_annealed_attention_runs_from_causal_to_bidirectional():
    tokens = row_tokens(CausalMask(), *random_rows(3, 40, seed=5))
    annealed = [dense_of(AnnealedCausalMask(torch.tensor(visible), torch.tensor(9)), tokens) for visible in (0.0, 1.0)]
    assert torch.equal(annealed[0], dense_of(CausalMask(), tokens))
    assert torch.equal(annealed[1], dense_of(DocumentMask(), tokens))
    one_document = Tokens(torch.zeros(1, 96, dtype=torch.long), torch.arange(96)[None])
    later = torch.ones(96, 96, dtype=torch.bool).triu(1)
    half, other_salt = (dense_of(AnnealedCausalMask(torch.tensor(0.5), torch.tensor(salt)), one_document)[0]
                        for salt in (9, 10))
    assert 0.47 < half[later].float().mean() < 0.53
    assert 0.47 < (half[later] != other_salt[later]).float().mean() < 0.53  # another salt, other keys


def _long_document_rows(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed rows of documents up to 600 tokens long, then padding: blocks of 128 that one
    document fills (full), that several share (partial) and that see nothing of each other."""
    generator = torch.Generator().manual_seed(seed)
    segments = torch.full((batch, length), PAD_DOCUMENT_ID)
    for row in range(batch):
        start, document, filled = 0, 0, length - 40 * row
        while start < filled:
            size = min(int(torch.randint(1, 600, (1,), generator=generator)), filled - start)
            segments[row, start:start + size] = document
            start, document = start + size, document + 1
    real = segments != PAD_DOCUMENT_ID
    return document_ids_for(real, segments), default_positions(length, real, segments, torch.device("cpu"))


def _kept_blocks(counts: torch.Tensor, indices: torch.Tensor) -> list:
    return [row[:count].tolist() for row, count in zip(indices.flatten(0, 2), counts.flatten().tolist())]


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_the_block_mask_from_the_dense_mask_is_create_block_mask_s(rule):
    """Whole blocks of 128 take the dense mask reduced block by block (no vmap over every pair)."""
    tokens = row_tokens(rule, *_long_document_rows(3, 768, seed=5))
    length = tokens.document.shape[1]
    queries = type(tokens)(*(field[:, :512] for field in tokens))  # fewer queries than keys too
    for query in (tokens, queries):
        built = rule.block_mask(query, tokens)
        reference = create_block_mask(rule.mask_mod(query, tokens), B=3, H=None, Q_LEN=query.document.shape[1],
                                      KV_LEN=length, device="cpu")
        for counts, indices in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices"),
                                ("q_num_blocks", "q_indices"), ("full_q_num_blocks", "full_q_indices")):
            assert torch.equal(getattr(built, counts), getattr(reference, counts)), counts
            assert (_kept_blocks(getattr(built, counts), getattr(built, indices))
                    == _kept_blocks(getattr(reference, counts), getattr(reference, indices))), indices
        assert torch.equal(built.to_dense(), reference.to_dense())
        assert built.seq_lengths == reference.seq_lengths and built.BLOCK_SIZE == reference.BLOCK_SIZE
    full = rule.block_mask(tokens, tokens).full_kv_num_blocks
    assert isinstance(rule, AnnealedCausalMask) or int(full.sum()) > 0  # the case of full blocks is met
