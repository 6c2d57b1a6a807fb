"""Time of writing the TensorBoard denoising views (``xdllm.history.write_tensorboard``).

A generation with ``history=topk`` writes, per sample, text cards and one step x position
picture per step (up to 32); validation writes them for a few samples at every validation, and
a free-text run for the samples it generates after training. This times
:func:`~xdllm.history.write_tensorboard` on history files recorded from a randomly initialised
MLM model (so the tokens are arbitrary, but the shapes are those of a real run):

- ``sort``: the built-in sort task, 8 samples, 9 new tokens in 9 steps (the demo's validation
  views: 72 pictures);
- ``text``: 8 samples, a 16-token prompt and 36 new tokens in 36 steps (the shape of a short
  free-text sample: 32 pictures each, 256 in all).

For each it reports the fastest of ``--repeats`` writes: seconds per sample, per picture, the
pictures written, and the generation itself for comparison (``views / generation``: what the
views cost relative to producing the samples). Prints a table, then one JSON line.
Usage: ``python scripts/bench_history_views.py [--settings text] [--samples 8] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from xdllm.data.tasks import draw_sample, get_task
from xdllm.data.tokenizer import SymbolTokenizer, builtin_tokenizer
from xdllm.history import HistoryTopKPlugin, write_tensorboard
from xdllm.history.tensorboard import frame_rows
from xdllm.history.view_defaults import DEFAULT_MAX_FRAMES
from xdllm_models.mlm.collator import MLMSeq2SeqPredCollator
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.predictor import MLMPredictor


@dataclass(frozen=True)
class Setting:
    name: str
    samples: int
    prompt_len: int
    new_tokens: int  # also the steps: one token per step


SETTINGS = (
    Setting("sort", samples=8, prompt_len=8, new_tokens=9),
    Setting("text", samples=8, prompt_len=16, new_tokens=36),
)


def record_histories(setting: Setting, folder: Path) -> float:
    """Generate ``setting``'s samples with a random model, history into ``folder``; returns the
    generation's seconds (history recording included)."""
    generator = torch.Generator().manual_seed(0)
    if setting.name == "sort":
        tokenizer = builtin_tokenizer()
        task = get_task("sort", length=setting.prompt_len)
        pairs = [draw_sample(task, "test", i, seed=0) for i in range(setting.samples)]
        examples = [{"prompt_ids": tokenizer.encode(" ".join(p)), "target_ids": tokenizer.encode(" ".join(t)),
                     "sample_index": i, "step": 0} for i, (p, t) in enumerate(pairs)]
    else:
        tokenizer = SymbolTokenizer([f"w{i}" for i in range(500)])
        prompts = torch.randint(4, tokenizer.vocab_size, (setting.samples, setting.prompt_len), generator=generator)
        examples = [{"prompt_ids": row, "target_ids": [], "sample_index": i, "step": 0}
                    for i, row in enumerate(prompts.tolist())]
    batch = MLMSeq2SeqPredCollator(tokenizer)(examples)
    torch.manual_seed(0)
    model = RotaryTransformerMLMModel(tokenizer.vocab_size, d_model=128, n_layers=4, n_heads=2,
                                      attn_backend="sdpa").eval()
    predictor = MLMPredictor(max_steps=setting.new_tokens, max_new_tokens=setting.new_tokens,
                             tokenizer=tokenizer, model=model, confidence="top_prob")
    start = time.perf_counter()
    predictor.predict(batch, history=HistoryTopKPlugin(k=5, output_dir=folder, tokenizer=tokenizer))
    return time.perf_counter() - start


def time_views(histories: Path, logdir: Path, repeats: int) -> float:
    """Fastest seconds of one ``write_tensorboard`` of every sample in ``histories``."""
    times = []
    for attempt in range(repeats):
        start = time.perf_counter()
        write_tensorboard(histories, logdir / str(attempt), max_samples=None)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=[s.name for s in SETTINGS],
                        default=[s.name for s in SETTINGS])
    parser.add_argument("--samples", type=int, default=None, help="samples per setting (default: 8)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the generation's own time, steady on a shared machine
    results = []
    for setting in (s for s in SETTINGS if s.name in args.settings):
        if args.samples is not None:
            setting = replace(setting, samples=args.samples)
        with tempfile.TemporaryDirectory() as tmp:
            histories = Path(tmp) / "history"
            generation = record_histories(setting, histories)
            seconds = time_views(histories, Path(tmp) / "tensorboard", args.repeats)
        pictures = setting.samples * len(frame_rows(setting.new_tokens, DEFAULT_MAX_FRAMES))
        results.append({"setting": setting.name, "samples": setting.samples, "pictures": pictures,
                        "views_s": round(seconds, 3), "per_sample_s": round(seconds / setting.samples, 3),
                        "per_picture_ms": round(1000 * seconds / pictures, 1),
                        "generation_s": round(generation, 3),
                        "views_over_generation": round(seconds / generation, 1)})
    print(f"{'setting':8} {'samples':>7} {'pictures':>8} {'views s':>8} {'s/sample':>8} {'ms/picture':>10} "
          f"{'gen s':>6} {'views/gen':>9}")
    for row in results:
        print(f"{row['setting']:8} {row['samples']:7d} {row['pictures']:8d} {row['views_s']:8.2f} "
              f"{row['per_sample_s']:8.2f} {row['per_picture_ms']:10.1f} {row['generation_s']:6.2f} "
              f"{row['views_over_generation']:9.1f}")
    print(json.dumps({"bench": "history_views", "results": results}))


if __name__ == "__main__":
    main()
