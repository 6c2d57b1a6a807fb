"""The ``xdllm`` command: train | generate | eval | models | history | data | tokenizer."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xdllm.cli.stderr_handler import quiet_library_chatter, say_xdllm_lines
from xdllm.cli.terminate import Terminated, sigterm_raises_terminated
from xdllm.errors import XdllmError, os_error_text
from xdllm.registry import ModelRegistryError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_TIME_LIMIT = 124  # as timeout(1) reports a command it stopped: training stopped at trainer.max_time
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as for any program whose reader went away


def _parser() -> argparse.ArgumentParser:
    from xdllm.cli.config_help import generate_options_help, train_options_help
    from xdllm.cli.data import add_data_parser
    from xdllm.cli.help_text import PREDICTOR_HELP, help_epilog
    from xdllm.cli.history import add_history_parser
    from xdllm.cli.models import add_models_parser
    from xdllm.cli.tokenizer import add_tokenizer_parser
    from xdllm.cli.version import ShowVersion

    train_epilog = help_epilog()
    parser = argparse.ArgumentParser(
        prog="xdllm", description="Diffusion language models: train, generate, inspect.",
        epilog=train_epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=ShowVersion)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in (
        ("train", "train a model (Hydra overrides; resume=<ckpt or run dir> to continue)"),
        ("generate", "run the predictor from a checkpoint and write predictions.jsonl"),
        ("eval", "loss and generation metrics of a checkpoint on a split (free text: loss only)"),
    ):
        epilog = (f"{train_options_help()}\n{train_epilog}" if name == "train"
                  else f"{generate_options_help(name)}\n{PREDICTOR_HELP}")
        sub = commands.add_parser(name, help=text, description=text, epilog=epilog,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides")
        sub.add_argument("--cfg", action="store_true",
                         help="print the composed config (YAML) and exit without running")
        if name in ("generate", "train"):
            what = "generation" if name == "generate" else "training run (one after another)"
            sub.add_argument("-m", "--multirun", action="store_true",
                             help=f"sweep: one {what} per combination of KEY=A,B,... values, "
                                  "each in a folder named by its settings")
    add_models_parser(commands)
    runs = commands.add_parser(
        "runs", help="the training runs under folders: step, best score, how each ended",
        description="List the training runs in or under FOLDERs (default: runs), one line each: family/task, the "
                    "step reached, the best value of checkpoint.monitor its validations logged, and how its last "
                    "xdllm train ended (finished, stopped, failed, training now, or without a word: killed), and "
                    "the overrides that tell the runs apart.")
    runs.add_argument("folders", nargs="*", type=Path, default=[Path("runs")], metavar="FOLDER")
    runs.add_argument("--json", action="store_true", help="one JSON object per run (JSON Lines), for scripts")
    runs.add_argument("--sort", choices=("folder", "best"), default="folder",
                      help="the order: by folder (default), or best: by the best value of checkpoint.monitor, best "
                           "first (runs of another metric in a group of their own, runs with none yet last)")
    add_history_parser(commands)
    add_data_parser(commands)
    add_tokenizer_parser(commands)
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


def refuse_several_values(command: str, overrides: Sequence[str]) -> None:
    """``train`` (without ``-m``) and ``eval`` run one configuration: ``KEY=A,B`` is refused with
    how to run one per value."""
    from xdllm.config.compose import first_swept_override

    swept = first_swept_override(overrides)
    if swept is None:
        return
    if command == "train":
        raise XdllmError(f"{swept.input_line} gives several values: add -m to train one run per value, one after "
                         "another (quote a single value that contains a comma)")
    key, values = swept.get_key_element(), " ".join(swept.sweep_string_iterator())
    generate = ("" if key in ("ckpt", "output_dir") else
                "; xdllm generate -m sweeps it in one command (the generation metrics of each value)")
    raise XdllmError(f"{swept.input_line} gives several values, but xdllm {command} runs one configuration: run it "
                     f"once per value, e.g. for v in {values}; do xdllm {command} ... {key}=$v; done{generate} "
                     "(quote a single value that contains a comma)")


def _cmd_train(overrides: Sequence[str], print_config: bool = False, sweep: bool = False) -> int:
    from xdllm.cli.config_help import composed_yaml
    from xdllm.config.compose import compose_config
    from xdllm.run.run_overrides import with_stored_overrides

    command = ("xdllm", "train", *overrides)
    overrides, resume = _split_resume(overrides)
    if resume is not None:
        from xdllm.folder_names import refuse_other_kind

        refuse_other_kind(resume, ("training run", "training sweep"),
                          "xdllm train resume= takes a training run's folder or checkpoint, or a training sweep's")
    if sweep or resume is not None:  # Lightning loads here, not before --cfg or a bad override is answered
        from xdllm.run import train_sweep

        if resume is not None and train_sweep.is_train_sweep(resume):
            if overrides or print_config:
                raise XdllmError(f"resume={resume} continues a stopped training sweep as it started: give it alone")
            with train_sweep.keeping_sweep_log(command) as sweep_log:
                return _sweep_done(train_sweep.continue_train_sweep(Path(resume).expanduser(), sweep_log))
        if sweep and resume is not None:
            raise XdllmError(f"-m starts a sweep; resume={resume} is not a sweep's folder (it has no sweep.yaml)")
        if sweep and print_config:  # one YAML document per run
            print("---\n".join(composed_yaml(config) for config in train_sweep.sweep_run_configs(overrides)), end="")
            return 0
        if sweep:
            with train_sweep.keeping_sweep_log(("xdllm", "train", "-m", *overrides)) as sweep_log:
                return _sweep_done(train_sweep.run_train_sweep(overrides, sweep_log))
    refuse_several_values("train", overrides)
    overrides = with_stored_overrides(resume, overrides)  # resume=<run> alone continues it as it was
    config = compose_config("train", overrides)
    if print_config:
        print(composed_yaml(config), end="")
        return 0
    from xdllm.run.train_call import train_and_finish

    result, summary = train_and_finish(config, overrides, resume, command)
    if not result.is_global_zero:
        return 0
    if result.stopped_at_step is not None:
        return _stopped(result, f", saved in {result.last_checkpoint}; continue with: {result.continue_command}")
    if summary is not None:
        print(json.dumps(summary, indent=2))
    return 0


def _sweep_done(result: Any) -> int:
    """Print a training sweep's results; the exit status of a sweep a signal stopped."""
    print(json.dumps(result.printed(), indent=2))
    if result.stopped is None:
        return 0
    return _stopped(result.stopped, f" of {result.stopped.run_dir}; continue the sweep with: {result.resume_command}")


def _stopped(run: Any, what_next: str) -> int:
    """Say what stopped a training run (a signal, ``trainer.max_time``) and at which step, then
    ``what_next``; the exit status for that cause."""
    print(f"xdllm: {run.stop_line}{what_next}", file=sys.stderr)
    return {"SIGTERM": EXIT_TERMINATED, "Ctrl-C": EXIT_INTERRUPTED}.get(run.stopped_by, EXIT_TIME_LIMIT)


def _cmd_generate(overrides: Sequence[str], print_config: bool = False, sweep: bool = False) -> int:
    from xdllm.cli.config_help import composed_yaml
    from xdllm.config.compose import compose_config
    from xdllm.config.override_text import check_override_syntax
    from xdllm.config.run_paths import absolute_generate_paths
    from xdllm.run.generate import config_to_print, generate_from_config
    from xdllm.run.run_log import GENERATE_LOG, keeping_run_log
    from xdllm.run.sweep import refuse_sweep_without_multirun, run_sweep, sweep_configs

    command = ("xdllm", "generate", *(["-m"] if sweep else []), *overrides)  # as given, for its log
    overrides, resume = _split_resume(overrides)
    check_override_syntax(overrides, "generate", sweep)
    overrides = absolute_generate_paths(overrides)
    if resume is not None:
        return _continue_generation(resume, overrides, print_config, sweep, command)
    if sweep and print_config:  # one YAML document per combination
        print("---\n".join(composed_yaml(config_to_print(config)) for config in sweep_configs(overrides)[1]), end="")
        return 0
    if not sweep:
        refuse_sweep_without_multirun(overrides)
        config = compose_config("generate", overrides)
        if print_config:
            print(composed_yaml(config_to_print(config)), end="")
            return 0
    with keeping_run_log(command, GENERATE_LOG) as generation_log:
        result = run_sweep(overrides) if sweep else generate_from_config(config)
        generation_log.result(None if sweep else result)  # a sweep's results: its sweep.jsonl
    print(json.dumps(result, indent=2))
    return 0


def _continue_generation(folder: str, overrides: Sequence[str], print_config: bool, sweep: bool,
                         command: Sequence[str]) -> int:
    from xdllm.config.schema import override_key
    from xdllm.run.generate import RESUME_OPTIONS
    from xdllm.run.run_log import GENERATE_LOG, keeping_run_log
    from xdllm.run.sweep import continue_stopped

    if sweep or print_config:
        raise XdllmError(f"resume= continues a stopped generation or sweep with the options it started with; it "
                         f"takes no {'-m' if sweep else '--cfg'} (its options are in {folder}/generate.yaml, or "
                         "sweep.yaml for a sweep)")
    others = [override for override in overrides if override_key(override).split(".")[0] not in RESUME_OPTIONS]
    if others:
        allowed = ", ".join("+frozen.NAME=" if key == "frozen" else f"{key}=" for key in RESUME_OPTIONS)
        raise XdllmError(f"resume= continues a generation with the options it started with (in {folder}); "
                         f"only {allowed} may be given with it, not {' '.join(others)}: start a new generation "
                         "for other options")
    with keeping_run_log(command, GENERATE_LOG) as generation_log:
        result = continue_stopped(Path(folder), overrides)
        generation_log.result(None if "sweep" in result else result)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_eval(overrides: Sequence[str], print_config: bool = False) -> int:
    from xdllm.cli.config_help import composed_yaml
    from xdllm.config.compose import compose_config
    from xdllm.run.evaluate import evaluate_from_config

    refuse_several_values("eval", overrides)
    if any(override.startswith("resume=") for override in overrides):
        raise XdllmError("resume= continues a stopped xdllm generate; xdllm eval writes nothing and has nothing to "
                         "continue: run it again")
    config = compose_config("generate", overrides)
    if print_config:
        print(composed_yaml(config), end="")
        return 0
    print(json.dumps(evaluate_from_config(config), indent=2))
    return 0


def _cmd_runs(folders: list[Path], as_json: bool, order: str) -> int:
    from xdllm.run.run_list import best_first, find_runs, run_record, run_table, summarize_run

    runs = [summarize_run(folder) for folder in find_runs(folders)]
    if order == "best":
        runs = best_first(runs)
    if as_json:  # no runs: no lines
        for run in runs:
            print(json.dumps(run_record(run)))
    elif runs:
        print("\n".join(run_table(runs, Path.cwd())))
    else:
        print(f"no training runs (a config.yaml beside a train.log) in {', '.join(map(str, folders))}")
    return 0


OVERRIDE_COMMANDS = ("train", "generate", "eval")


def flags_first(argv: Sequence[str]) -> list[str]:
    """``train`` / ``generate`` / ``eval`` take their flags (``--cfg``, generate's ``-m``,
    ``--help``) anywhere among the overrides: argparse stops reading a ``nargs="*"`` positional at
    the first flag, so the flags are moved before the overrides (an override never starts with ``-``)."""
    if not argv or argv[0] not in OVERRIDE_COMMANDS:
        return list(argv)
    command, *rest = argv
    return [command, *(a for a in rest if a.startswith("-")), *(a for a in rest if not a.startswith("-"))]


def _run_command(arguments: argparse.Namespace) -> int:
    if arguments.command in OVERRIDE_COMMANDS:
        from xdllm.config.run_paths import quoted_paths

        arguments.overrides = quoted_paths(arguments.overrides)
    if arguments.command == "train":
        return _cmd_train(arguments.overrides, arguments.cfg, arguments.multirun)
    if arguments.command == "generate":
        return _cmd_generate(arguments.overrides, arguments.cfg, arguments.multirun)
    if arguments.command == "eval":
        return _cmd_eval(arguments.overrides, arguments.cfg)
    if arguments.command == "models":
        from xdllm.cli.models import run_models_command

        return run_models_command(arguments)
    if arguments.command == "runs":
        return _cmd_runs(arguments.folders, arguments.json, arguments.sort)
    if arguments.command == "data":
        from xdllm.cli.data import run_data_command

        return run_data_command(arguments)
    if arguments.command == "tokenizer":
        from xdllm.cli.tokenizer import run_tokenizer_command

        return run_tokenizer_command(arguments)
    from xdllm.cli.history import run_history_command

    return run_history_command(arguments)


def refuse_multirun(argv: Sequence[str]) -> None:
    """``-m`` belongs to ``generate`` and ``train``; on ``eval`` it is one line saying so, not
    argparse's usage of the whole command."""
    if argv and argv[0] == "eval" and {"-m", "--multirun"} & set(argv[1:]):
        raise XdllmError("-m (a sweep) is for xdllm generate and train: xdllm eval runs one configuration; run it "
                         "once per value, e.g. for v in A B; do xdllm eval ... KEY=$v; done")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if isinstance(sys.stdout, io.TextIOWrapper):  # each line at once: in `2>&1 | tee` the lines keep their order
        sys.stdout.reconfigure(line_buffering=True)
    try:
        refuse_multirun(argv)
        arguments = _parser().parse_args(flags_first(argv))
        quiet_library_chatter()
        say_xdllm_lines()
        with sigterm_raises_terminated():
            status = _run_command(arguments)
        sys.stdout.flush()  # a reader that went away is found here, not in the flush at exit
        return status
    except (XdllmError, ModelRegistryError) as error:
        print(f"xdllm: error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader of stdout closed it (`xdllm history show ... | head -1`): stop quietly, as
        # coreutils do (killed by SIGPIPE, which a shell reports as 141 = 128 + 13); stdout goes
        # to /dev/null so that Python's flush at exit raises no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:  # a folder that cannot be written, a disk that is full, ...
        print(f"xdllm: error: {os_error_text(error)}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print("xdllm: stopped by SIGTERM", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt as interrupt:
        print(f"\nxdllm: interrupted{_interrupted_run_hint(interrupt)}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _interrupted_run_hint(interrupt: KeyboardInterrupt) -> str:
    """Where a training stopped at once left its newest checkpoint, and how to continue. Only a
    command that loaded the training module can raise ``TrainingInterrupted``: any other is not
    made to import it (and Lightning with it, two seconds) on its way out."""
    training = sys.modules.get("xdllm.run.train")
    if training is None or not isinstance(interrupt, training.TrainingInterrupted):
        return ""
    from xdllm.run.run_checkpoint import CHECKPOINT_DIR
    from xdllm.train.checkpoint_layout import LAST_NAME

    last = interrupt.run_dir / CHECKPOINT_DIR / LAST_NAME
    if not last.exists():
        return f"; no checkpoint was saved in {interrupt.run_dir} yet"
    return f": training stopped at once; the newest saved state is {last}; continue with: {interrupt.continue_command}"


if __name__ == "__main__":
    sys.exit(main())
