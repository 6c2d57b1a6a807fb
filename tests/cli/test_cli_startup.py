"""The CLI starts quickly (its parser and the families' discovery load no torch; generation,
evaluation and the history views neither Lightning nor dynamo, each a second or more to import,
nor matplotlib until a view is drawn) and stops quietly when the reader of its output goes away."""

import subprocess
import sys

from tiny_run import TINY

from xdllm.cli.main import main


def test_the_parser_and_the_history_views_load_neither_lightning_nor_dynamo():
    probe = ("import sys; import xdllm.cli.main as cli; cli._parser(); import xdllm.history; "
             "print(sorted(name for name in ('lightning', 'torch._dynamo') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_help_and_the_families_list_load_no_torch():
    """``xdllm --help``, every command's ``--help`` and ``xdllm models`` build the command line and
    discover the families without torch (0.17 s where loading it made them 1.2 s)."""
    probe = ("import sys; import xdllm.cli.main as cli; cli._parser(); from xdllm.registry import "
             "discover_families; discover_families(); import xdllm.history; print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def test_matplotlib_loads_when_a_view_is_drawn_not_before():
    """The parser, recording and reading history need no matplotlib (a third of ``xdllm --help``'s
    start); the figure classes load it on first use."""
    probe = ("import sys; import xdllm.cli.main as cli; cli._parser(); import xdllm.history.tensorboard; "
             "from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard; "
             "print('matplotlib' in sys.modules); from xdllm.history import DenoisingFigure; "
             "print('matplotlib' in sys.modules, DenoisingFigure.__module__)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["False", "True xdllm.history.figures"]


def test_generate_and_eval_load_neither_lightning_nor_dynamo_nor_sympy(tmp_path):
    """Generation and evaluation read a checkpoint, held-out data and the losses without Lightning
    (a second to import), torch._dynamo (half a second, through activation checkpointing) or
    DTensor's sympy (a fifth): ``xdllm generate`` of 16 samples took 3.0 s with them, 1.6 s without."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
    probe = ("import sys; from xdllm.cli.main import main; "
             f"main(['generate', 'ckpt={run_dir}', 'num_samples=4', 'output_dir={tmp_path / 'out'}']); "
             f"main(['eval', 'ckpt={run_dir}', 'num_samples=4']); "
             "print(sorted(name for name in ('lightning', 'torch._dynamo', 'sympy') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "predictions.jsonl").is_file()


def test_train_answers_cfg_and_a_bad_override_before_loading_lightning():
    probe = ("import sys; from xdllm.cli.main import main; main(['train', '--cfg', 'experiment=sort_mlm']); "
             "main(['train', 'experiment=sort_mlm', 'optim.lrr=3']); print('lightning' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "name: sort_mlm" in result.stdout and "unknown key 'optim.lrr'" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_the_data_package_still_exports_its_names():
    from xdllm import data

    assert data.DiffusionDataModule.__name__ == "DiffusionDataModule"
    assert issubclass(data.DiffusionDataModule, data.DiffusionData)
    assert data.load_tokenizer("builtin").vocab_size == data.builtin_tokenizer().vocab_size
    assert "SortTask" in dir(data) and set(data.__all__) <= set(dir(data))


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly():
    process = subprocess.Popen([sys.executable, "-m", "xdllm.cli.main", "train", "--cfg"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # as `xdllm train --cfg | head -0` does
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141, stderr
    assert stderr == ""
