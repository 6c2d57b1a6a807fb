"""The help text of the ``xdllm`` command: the config groups and examples (``xdllm --help``),
and the predictor's options (``xdllm generate --help``, ``xdllm eval --help``)."""

from __future__ import annotations

from xdllm.registry import ModelRegistryError, discover_families


def help_epilog() -> str:
    """The config groups with their options, and examples of each command: `xdllm --help`'s epilog."""
    from xdllm.config.compose import group_options

    try:
        families = discover_families()
    except ModelRegistryError as error:
        return f"(model discovery failed: {error})"
    lines = ["config groups (choose with GROUP=OPTION, e.g. experiment=sort_mlm):"]
    for group, options in group_options(families).items():
        lines.append(f"  {group:<18} {', '.join(options)}")
    lines += [
        "",
        "examples:",
        "  xdllm train experiment=sort_mlm",
        "  xdllm train experiment=sort_mlm trainer.max_steps=200 run_dir=runs/quick",
        "  xdllm generate ckpt=runs/quick predictor.threshold=0.9 history=topk",
        "  xdllm eval ckpt=runs/quick split=test",
        "  xdllm train --cfg experiment=sort_mlm      (print the composed config, run nothing)",
        "  xdllm train -m experiment=sort_mlm optim.lr=1e-3,3e-4 seed=0,1   (a sweep: one run each)",
        "  xdllm train resume=runs/quick trainer.max_steps=400   (continue a run, to step 400)",
        "  xdllm train resume=runs/quick/checkpoints/best.ckpt optim.lr=3e-4   (back to its best step;"
        " later files move aside)",
        "  xdllm train model=mdlm init_from=runs/quick optim.lr=3e-4   (start from another run's weights)",
        "  xdllm train experiment=sort_mlm early_stopping.patience=3   (stop once val/exact_match has not"
        " improved for 3 validations)",
        "  xdllm history show runs/quick/generate/<time>/history/history-00000.pt --sample 0",
        "  xdllm data prepare corpus.txt -o data/corpus --tokenizer tokenizer.json",
        "  xdllm models new my_mlm --from mlm   (a family of your own: a copy of mlm, to change)",
        "",
        "from Python (docs/training.md, docs/predictor.md):",
        "  import xdllm; result = xdllm.train_run('experiment=sort_mlm', 'run_dir=runs/quick')",
        "  run = xdllm.load_trained('runs/quick')      (or result.load())",
        "  xdllm.complete(run, ['7 6 5 5 5 4 9 6'], predictor={'threshold': 0.9})",
        "  xdllm.evaluate_run(run, split='test', predictor={'threshold': 0.9})",
    ]
    return "\n".join(lines)


PREDICTOR_HELP = """\
predictor.KEY=VALUE is merged over the run's predictor config (mlm and mdlm; other
families take their own, named in docs/model_families.md):
  max_steps, max_new_tokens, confidence=top_prob|prob_diff|entropy|null,
  threshold, entropy_budget, noise_schedule=linear|cosine|log_linear, temperature,
  top_k, top_p, block_size, stop_at_eos, remask, prefix_cache, prefix_cache_refresh,
  dual_cache, guidance, seed, skip_special_tokens   (docs/predictor.md)
  mdlm also: sampler=confidence|ancestral|remdm, and for remdm: remdm_schedule=
  cap|rescale|conf|loop, remdm_eta, remdm_t_on, remdm_t_off, remdm_alpha_on

examples:
  xdllm generate ckpt=runs/sort_mlm predictor.threshold=0.9 history=topk
  xdllm generate ckpt=runs/sort_mlm prompts_file=prompts.txt predictor.temperature=0.7
  xdllm generate ckpt=runs/sort_mlm prompts_file=bench.jsonl   ({"prompt", "response"}: scored)
  xdllm eval ckpt=runs/sort_mlm split=validation
  xdllm generate -m ckpt=runs/sort_mlm predictor.threshold=0.5,0.7,0.9   (a sweep)
  xdllm generate ckpt=runs/text_mdlm judge=runs/text_arlm predictor.temperature=1   (Gen PPL)
  xdllm generate --cfg ckpt=runs/sort_mlm      (print the composed options, run nothing)
"""
