"""Overrides for fast end-to-end runs of the built-in sort task in tests."""

TINY_RUN = [
    "experiment=sort_mlm",
    "task.params.length=4",
    "data.batch_size=8",
    "data.eval_batch_size=16",
    "data.num_val_samples=16",
    "data.num_test_samples=16",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "optim.warmup_steps=2",
    "history.num_samples=0",
    "generate_after_train=false",
    "torch_threads=1",
]
TINY_MLM = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2"]
TINY = TINY_RUN + TINY_MLM

TINY_TEXT = ["task.params.max_tokens=16", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
             "trainer.max_steps=4", "trainer.val_check_interval=2", "data.batch_size=8",
             "data.num_val_samples=8", "data.num_test_samples=8", "trainer.enable_model_summary=false",
             "history.num_samples=0", "torch_threads=1", "optim.warmup_steps=1"]
"""Overrides for fast runs on a text file (``task=text_file``, a tokenizer file, a model family)."""
