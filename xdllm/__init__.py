"""xdllm: diffusion language models in the masked (MLM) style.

From Python, a trained run: ``xdllm.load_trained(path)`` (a checkpoint file or run directory),
``xdllm.complete(run, prompts)``, ``xdllm.evaluate_run(run, split="test")`` and
``xdllm.score_choices(run, "questions.jsonl")`` (multiple choice, per question). They are imported
on first use, so that ``import xdllm.<part>`` stays light.
"""

import importlib as _importlib

_LAZY = {"load_trained": "xdllm.run.checkpoint", "TrainedRun": "xdllm.run.checkpoint",
         "complete": "xdllm.run.complete", "evaluate_run": "xdllm.run.evaluate",
         "score_choices": "xdllm.run.evaluate"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'xdllm' has no attribute {name!r}")
    return getattr(_importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:  # tab completion in a notebook lists the names imported on first use
    return sorted({*globals(), *_LAZY})
