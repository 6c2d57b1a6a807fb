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
