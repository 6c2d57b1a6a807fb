"""The ``xdllm`` command: train | generate | eval | models | history | data."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Sequence

from xdllm.errors import XdllmError
from xdllm.registry import ModelRegistryError, discover_families

EXIT_USAGE = 2


def _help_epilog() -> str:
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
        "  xdllm history show runs/quick/generate/<time>/history/history-00000.pt --sample 0",
        "  xdllm data prepare corpus.txt -o data/corpus --tokenizer tokenizer.json",
    ]
    return "\n".join(lines)


GENERATE_EPILOG = """\
options (KEY=VALUE; defaults in configs/generate.yaml):
  ckpt=PATH                 checkpoint file or run directory (required)
  split=test|validation     prompts from the run's task split, or
  prompts_file=PATH         one prompt per line, tokenized with the run's tokenizer
  num_samples=N batch_size=N output_dir=PATH
  history=topk history_k=5 history_tensorboard_samples=8     (generate only)
  predictor.KEY=VALUE       merged over the run's predictor config:
      max_steps, max_new_tokens, confidence=top_prob|prob_diff|entropy|null,
      threshold, noise_schedule=linear|cosine|log_linear, temperature, top_k, top_p,
      block_size, stop_at_eos, seed, skip_special_tokens   (docs/predictor.md)

examples:
  xdllm generate ckpt=runs/sort_mlm predictor.threshold=0.9 history=topk
  xdllm generate ckpt=runs/sort_mlm prompts_file=prompts.txt predictor.temperature=0.7
  xdllm eval ckpt=runs/sort_mlm split=validation
"""


def _parser() -> argparse.ArgumentParser:
    from xdllm.cli.data import add_data_parser
    from xdllm.cli.history import add_history_parser

    train_epilog = _help_epilog()
    parser = argparse.ArgumentParser(
        prog="xdllm", description="Diffusion language models: train, generate, inspect.",
        epilog=train_epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in (
        ("train", "train a model (Hydra overrides; resume=<ckpt or run dir> to continue)"),
        ("generate", "run the predictor from a checkpoint and write predictions.jsonl"),
        ("eval", "loss and generation metrics of a checkpoint on a split"),
    ):
        epilog = train_epilog if name == "train" else GENERATE_EPILOG
        sub = commands.add_parser(name, help=text, description=text, epilog=epilog,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides")
    commands.add_parser("models", help="list the discovered model-family packages")
    add_history_parser(commands)
    add_data_parser(commands)
    return parser


def _split_resume(overrides: Sequence[str]) -> tuple[list[str], str | None]:
    """``resume=PATH`` is a command option, not a config key."""
    rest, resume = [], None
    for override in overrides:
        if override.startswith("resume="):
            resume = override.partition("=")[2] or None
        else:
            rest.append(override)
    return rest, resume


def _cmd_train(overrides: Sequence[str]) -> int:
    from xdllm.config.compose import compose_config
    from xdllm.run.generate import generate_from_config
    from xdllm.run.train import train

    overrides, resume = _split_resume(overrides)
    config = compose_config("train", overrides)
    result = train(config, resume=resume)
    if not result.is_global_zero:
        return 0
    print(f"run directory: {result.run_dir}")
    checkpoint = result.best_checkpoint or result.last_checkpoint
    if config.generate_after_train and checkpoint is not None:
        options = compose_config("generate", [f"ckpt={checkpoint}", "split=test", "history=topk"])
        summary = generate_from_config(options)
        print(json.dumps(summary, indent=2))
    return 0


def _cmd_generate(overrides: Sequence[str]) -> int:
    from xdllm.config.compose import compose_config
    from xdllm.run.generate import generate_from_config

    config = compose_config("generate", overrides)
    print(json.dumps(generate_from_config(config), indent=2))
    return 0


def _cmd_eval(overrides: Sequence[str]) -> int:
    from xdllm.config.compose import compose_config
    from xdllm.run.generate import evaluate_from_config

    config = compose_config("generate", overrides)
    print(json.dumps(evaluate_from_config(config), indent=2))
    return 0


def _cmd_models() -> int:
    families = discover_families()
    if not families:
        print("no model families found")
    for name, registered in sorted(families.items()):
        print(f"{name:<12} {registered.family.description}")
        print(f"{'':<12} source: {registered.source}")
        print(f"{'':<12} configs: {registered.family.config_dir}")
    return 0


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record, not the stream that was
    current when the handler was made (a redirected or replaced stderr keeps working)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _configure_output() -> None:
    """xdllm's own INFO lines on stderr; Lightning keeps its own handler; no warning spam."""
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    # Lightning's start-up chatter (accelerators found, a product tip) says nothing about the run.
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("xdllm", "xdllm_models"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    _configure_output()
    try:
        if arguments.command == "train":
            return _cmd_train(arguments.overrides)
        if arguments.command == "generate":
            return _cmd_generate(arguments.overrides)
        if arguments.command == "eval":
            return _cmd_eval(arguments.overrides)
        if arguments.command == "models":
            return _cmd_models()
        if arguments.command == "data":
            from xdllm.cli.data import run_data_command

            return run_data_command(arguments)
        from xdllm.cli.history import run_history_command

        return run_history_command(arguments)
    except (XdllmError, ModelRegistryError) as error:
        print(f"xdllm: error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # a folder that cannot be written, a disk that is full, ...
        where = f": {error.filename}" if error.filename else ""
        print(f"xdllm: error: {error.strerror or error}{where}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
