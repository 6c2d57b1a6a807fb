import time

import torch

from xdllm_models.mlm.model import RotaryTransformerMLMModel

VOCAB = 41


def make_model(attn_backend: str = "sdpa") -> RotaryTransformerMLMModel:
    torch.manual_seed(0)
    return RotaryTransformerMLMModel(VOCAB, d_model=32, n_layers=2, n_heads=2, max_positions=128,
                                     attn_backend=attn_backend).eval()


def test_seed_signature_defaults_and_logits_shape():
    model = RotaryTransformerMLMModel(VOCAB)
    assert (model.config.d_model, model.config.n_layers, model.config.n_heads) == (128, 4, 4)
    assert model.config.ff_dim == 512 and model.config.max_positions == 1024
    assert model.config.attn_backend == "auto"
    logits = model(torch.randint(0, VOCAB, (2, 5)))
    assert logits.shape == (2, 5, VOCAB) and logits.dtype == torch.float32


def test_left_padded_prompts_get_the_logits_they_have_alone():
    model = make_model()
    torch.manual_seed(3)
    prompts = [torch.randint(0, VOCAB, (n,)) for n in (3, 6, 4)]
    width = 6
    batch = torch.zeros(3, width, dtype=torch.long)
    real = torch.zeros(3, width, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        batch[row, width - len(prompt):] = prompt
        real[row, width - len(prompt):] = True
    with torch.no_grad():
        batched = model(batch, attention_mask=real)
        for row, prompt in enumerate(prompts):
            alone = model(prompt[None])[0]
            torch.testing.assert_close(batched[row, width - len(prompt):], alone, atol=1e-5, rtol=0)


def test_flex_and_sdpa_agree_on_a_packed_row_and_match_documents_alone():
    """The one compiled FlexAttention test (CPU inference; compiling takes ~25 s)."""
    sdpa, flex = make_model("sdpa"), make_model("flex")
    torch.manual_seed(5)
    lengths = (7, 12, 5)
    documents = [torch.randint(0, VOCAB, (n,)) for n in lengths]
    row_length = 32
    row = torch.zeros(1, row_length, dtype=torch.long)
    segments = torch.full((1, row_length), -1)
    start = 0
    for index, document in enumerate(documents):
        row[0, start:start + len(document)] = document
        segments[0, start:start + len(document)] = index
        start += len(document)
    with torch.no_grad():
        started = time.perf_counter()
        flex_logits = flex(row, segment_ids=segments)
        compile_and_run_s = time.perf_counter() - started
        sdpa_logits = sdpa(row, segment_ids=segments)
        start = 0
        for document in documents:
            alone = sdpa(document[None])[0]
            torch.testing.assert_close(flex_logits[0, start:start + len(document)], alone,
                                       atol=1e-5, rtol=0)
            start += len(document)
    torch.testing.assert_close(flex_logits, sdpa_logits, atol=1e-5, rtol=0)
    print(f"flex compile + first forward: {compile_and_run_s:.1f} s")


def test_layernorm_is_selectable_from_the_model_config():
    model = RotaryTransformerMLMModel(VOCAB, d_model=32, n_layers=1, n_heads=2, norm="layernorm")
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    assert norms and all(isinstance(m, torch.nn.LayerNorm) for m in norms)
