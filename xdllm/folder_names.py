"""The names of the files that say what a folder is, in a module light enough for the command
line's hints and the history views, which read them without loading the code that writes them
(torch, Lightning)."""

GENERATE_CONFIG = "generate.yaml"
"""A generation folder's resolved settings (:mod:`xdllm.run.generation_record`)."""
SWEEP_PLAN = "sweep.yaml"
"""A sweep's folder: each run's (:mod:`xdllm.run.train_sweep`) or generation's (:mod:`xdllm.run.sweep`)
settings, what ``resume=<sweep>`` reads."""
