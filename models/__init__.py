"""Built-in model-family packages, installed as ``xdllm_models``."""
