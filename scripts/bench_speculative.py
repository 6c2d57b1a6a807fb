"""Speculative decoding with a DFlash drafter against its target alone: acceptance and speedup.

Loads a drafter run (its target comes from the run's ``frozen.target``) and decodes the same
prompts twice with :class:`~xdllm_models.dflash.predictor.SpeculativePredictor`: speculatively
(a drafter pass and a target pass per round) and with the target alone (``speculative=False``:
one target pass per token, KV cache). Greedily by default; ``--temperature`` (with ``--top-k``,
``--top-p``, ``--seed``) samples, by speculative sampling and from the target alone. Prompts are the run's test split
(a built-in task), or with ``--text-file`` the first ``--prompt-tokens`` tokens of each line of
a local text file (its first ``--num-samples`` lines of at least that many tokens plus one).

Each mode runs ``--repeats`` times, alternating; the fastest repeat of each counts (on a shared
machine the minimum is the least disturbed). Prints one JSON line:

- ``acceptance_length``: tokens committed per verification pass (accepted drafts plus the
  target's own token; the prompt pass and its first token are left out);
- ``target_passes_per_token``: target forward passes (the prompt's included) per generated token
  (the target alone: 1);
- ``speedup``: wall time per generated token of the target alone / of speculative decoding
  (``speedup_cpu``: the same with the process CPU time, steadier under load); greedy, both
  generate the same tokens, sampled, each its own samples;
- ``identical``: whether both modes generated the same tokens for every prompt (greedy only:
  sampled, the two modes draw differently and only their distributions agree; null).

With ``--compare-drafter-cache`` a third mode decodes speculatively with the drafter's context
cache off (``drafter_cache=False``: every draft recomputes the context's keys and values), and
the line adds ``ms_per_round`` / ``ms_per_round_uncached`` (wall time per speculative round, a
draft and a verification), ``drafter_cache_speedup`` (their ratio; ``_cpu``: with CPU time) and
``identical_with_drafter_cache`` (the cache must not change a token).

Usage: ``python scripts/bench_speculative.py --drafter runs/dflash/sort_drafter [--block-size 8]
[--num-samples 128] [--batch-size 1] [--repeats 3] [--text-file FILE --prompt-tokens 4]
[--max-new-tokens N] [--ignore-eos] [--temperature 1 --top-k K --top-p P --seed S]
[--compare-drafter-cache]`` (run from the directory the drafter was trained in: ``frozen.target``
may be a relative path).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from xdllm.collate import PromptCollator
from xdllm.interfaces import Example
from xdllm.run.checkpoint import TrainedRun, load_trained
from xdllm_models.dflash.predictor import SpeculativePredictor


def text_file_batches(run: TrainedRun, path: Path, prompt_tokens: int, num_samples: int,
                      batch_size: int) -> list[dict[str, Any]]:
    """The first ``prompt_tokens`` tokens of each line long enough to have one more."""
    examples: list[Example] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            ids = run.tokenizer.encode(line.strip()) if line.strip() else []
        except ValueError as error:
            raise SystemExit(f"{path}:{number}: the drafter run's tokenizer cannot encode it: {error}") from None
        if len(ids) > prompt_tokens:
            examples.append(Example(prompt_ids=ids[:prompt_tokens], target_ids=[], sample_index=len(examples), step=0))
        if len(examples) == num_samples:
            break
    if not examples:
        raise SystemExit(f"{path}: no line has more than {prompt_tokens} tokens")
    collate = PromptCollator(run.tokenizer)
    batches = [dict(collate(examples[start:start + batch_size])) for start in range(0, len(examples), batch_size)]
    for batch in batches:
        batch.pop("target_ids")
    return batches


def task_batches(run: TrainedRun, num_samples: int, batch_size: int) -> list[dict[str, Any]]:
    """The run's test split, collated for prediction."""
    run.config.data.eval_batch_size = batch_size
    run.config.data.num_test_samples = num_samples
    return list(run.datamodule().held_out_dataloader("test", "prediction"))


def timed(predictor: SpeculativePredictor, run: TrainedRun, batches: Sequence[dict[str, Any]]
          ) -> tuple[float, float, list[dict[str, Any]]]:
    """Wall and CPU seconds of decoding every batch, and the predictions."""
    wall, cpu = time.perf_counter(), time.process_time()
    outputs = [predictor.predict(batch, model=run.model, frozen=run.frozen) for batch in batches]
    return time.perf_counter() - wall, time.process_time() - cpu, outputs


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", required=True, help="drafter run directory or checkpoint")
    parser.add_argument("--block-size", type=int, default=None, help="default: the drafter's")
    parser.add_argument("--num-samples", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's")
    parser.add_argument("--text-file", type=Path, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: sample")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0, help="base of the per-sample random streams")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every sample generates --max-new-tokens (long contexts for timing)")
    parser.add_argument("--compare-drafter-cache", action="store_true",
                        help="also decode with the drafter's context cache off, and compare")
    args = parser.parse_args(argv)
    for name in ("num_samples", "batch_size", "repeats", "prompt_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    run = load_trained(args.drafter)
    family = run.config.get("model_family")
    if family != "dflash":
        parser.error(f"--drafter {args.drafter} is a run of the {family} family, not a dflash drafter "
                     "(train one with experiment=sort_dflash, docs/dflash.md)")
    if args.text_file is not None:
        batches = text_file_batches(run, args.text_file, args.prompt_tokens, args.num_samples, args.batch_size)
    else:
        batches = task_batches(run, args.num_samples, args.batch_size)
    new_tokens = args.max_new_tokens or run.max_new_tokens
    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
                "stop_at_eos": not args.ignore_eos}
    try:
        modes = {"speculative": SpeculativePredictor(new_tokens, run.tokenizer, block_size=args.block_size,
                                                     **sampling),
                 "target": SpeculativePredictor(new_tokens, run.tokenizer, speculative=False, **sampling)}
        if args.compare_drafter_cache:
            modes["uncached"] = SpeculativePredictor(new_tokens, run.tokenizer, block_size=args.block_size,
                                                     drafter_cache=False, **sampling)
    except ValueError as error:
        parser.error(str(error))
    best: dict[str, tuple[float, float]] = {}
    outputs: dict[str, list[dict[str, Any]]] = {}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for name, predictor in modes.items():
                wall, cpu, outputs[name] = timed(predictor, run, batches)
                previous = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(previous[0], wall), min(previous[1], cpu))
    speculative, target = outputs["speculative"], outputs["target"]
    target_passes = sum(sum(out["target_passes"]) for out in speculative)
    generated = sum(sum(out["generated_tokens"]) for out in speculative)
    generated_target = sum(sum(out["generated_tokens"]) for out in target)
    samples = sum(len(out["text"]) for out in speculative)
    seconds_per_token = {name: (wall / max(count, 1), cpu / max(count, 1))
                         for name, (wall, cpu), count in (("speculative", best["speculative"], generated),
                                                          ("target", best["target"], generated_target))}
    result = {
        "drafter": str(run.checkpoint),
        "prompts": str(args.text_file) if args.text_file is not None else f"{run.config.task.name} test split",
        "block_size": args.block_size or run.model.block_size,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "num_samples": samples,
        "batch_size": args.batch_size,
        "acceptance_length": round((generated - samples) / max(target_passes - samples, 1), 3),
        "target_passes_per_token": round(target_passes / max(generated, 1), 3),
        "speedup": round(seconds_per_token["target"][0] / seconds_per_token["speculative"][0], 3),
        "speedup_cpu": round(seconds_per_token["target"][1] / seconds_per_token["speculative"][1], 3),
        "tokens_per_second": round(generated / best["speculative"][0], 1),
        "tokens_per_second_target": round(generated_target / best["target"][0], 1),
        "identical": (all(torch.equal(a["ids"], b["ids"]) for a, b in zip(speculative, target))
                      if args.temperature == 0.0 else None),
        "generated_tokens_per_sample": round(generated / max(samples, 1), 2),
        "generated_tokens_per_sample_target": round(generated_target / max(samples, 1), 2),
    }
    if args.compare_drafter_cache:
        rounds = max(sum(sum(out["draft_passes"]) for out in speculative), 1)
        result.update({
            "ms_per_round": round(1000 * best["speculative"][0] / rounds, 3),
            "ms_per_round_uncached": round(1000 * best["uncached"][0] / rounds, 3),
            "drafter_cache_speedup": round(best["uncached"][0] / best["speculative"][0], 3),
            "drafter_cache_speedup_cpu": round(best["uncached"][1] / best["speculative"][1], 3),
            "identical_with_drafter_cache": all(torch.equal(a["ids"], b["ids"])
                                                for a, b in zip(speculative, outputs["uncached"])),
        })
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
