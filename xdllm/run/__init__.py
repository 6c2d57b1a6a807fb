"""Running things: build a run's objects from a config, train, load checkpoints, generate, evaluate.

``xdllm.train`` holds the Lightning harness (module, optimizer, callbacks); this package turns
a composed config into a run and is what the CLI calls.
"""
