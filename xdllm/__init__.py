"""xdllm: diffusion language models in the masked (MLM) style.

From Python, a training run: ``xdllm.train_run("experiment=sort_mlm", "trainer.max_steps=300")``
(the overrides of ``xdllm train``; ``xdllm.train`` is the package of the training loop) returns a
:class:`TrainingResult`. A trained run: ``xdllm.load_trained(path)`` (a checkpoint file or run directory),
``xdllm.complete(run, prompts)``, ``xdllm.evaluate_run(run, split="test")`` and
``xdllm.score_choices(run, "questions.jsonl")`` (multiple choice, per question). They are imported
on first use, so that ``import xdllm.<part>`` stays light.
"""

from xdllm.lazy_names import lazy_names as _lazy_names

_LAZY = {"load_trained": "run.checkpoint", "TrainedRun": "run.checkpoint", "complete": "run.complete",
         "evaluate_run": "run.evaluate", "score_choices": "run.evaluate", "train_run": "run.train_call",
         "TrainingResult": "run.train_call", "TrainingStopped": "run.train_call"}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = _lazy_names(__name__, _LAZY)
