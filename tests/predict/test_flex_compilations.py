"""Generation through compiled flex compiles attention once per shape bucket, not once per
batch width (counted with dynamo's compile counter backend, which runs the graphs eagerly)."""

import torch
from predict_fakes import LetterTokenizer, prompt_batch

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig
from xdllm.nn.buckets import bucket_shape
from xdllm.predict import UnmaskingPredictor


def test_generation_through_flex_compiles_once_per_bucket(flex_compile_counter):
    """The engine over batches of 1 to 8 prompts of 0 to 20 tokens (rows finish and leave, so
    a batch runs at several row counts): every shape is compiled for once per bucket."""
    torch.manual_seed(0)
    model = RotaryTransformer(RotaryTransformerConfig(vocab_size=20, d_model=32, n_layers=1, n_heads=4,
                                                      max_positions=64, attn_backend="flex")).eval()
    predictor = UnmaskingPredictor(max_steps=6, max_new_tokens=6, tokenizer=LetterTokenizer(), confidence="top_prob",
                                   threshold=0.2, stop_at_eos=True)
    generator = torch.Generator().manual_seed(3)
    shapes, buckets = set(), set()
    final_hidden = model.final_hidden  # what the engine runs (it projects only the output window)

    def recording_final_hidden(input_ids, **kwargs):
        shapes.add(tuple(input_ids.shape))
        buckets.add(bucket_shape(*input_ids.shape))
        return final_hidden(input_ids, **kwargs)

    model.final_hidden = recording_final_hidden
    for batch in (1, 2, 3, 5, 8):
        for width in (1, 9, 20):
            prompts = [torch.randint(4, 20, (int(torch.randint(0, width + 1, (1,), generator=generator)),),
                                     generator=generator).tolist() for _ in range(batch)]
            predictor.predict(prompt_batch(prompts), model=model)
    # rows 1..8 fall in 4 row buckets, widths up to 26 (20 + 6 new tokens) in 2 width buckets
    assert flex_compile_counter.frame_count == len(buckets) <= 4 * 2 < len(shapes)
