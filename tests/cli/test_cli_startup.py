"""The CLI's parser and the history views start without loading Lightning or dynamo (each takes
a second or more to import), so `xdllm --help` and `xdllm history show` answer quickly."""

import subprocess
import sys


def test_the_parser_and_the_history_views_load_neither_lightning_nor_dynamo():
    probe = ("import sys; import xdllm.cli.main as cli; cli._parser(); import xdllm.history; "
             "print(sorted(name for name in ('lightning', 'torch._dynamo') if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_the_data_package_still_exports_its_names():
    from xdllm import data

    assert data.DiffusionDataModule.__name__ == "DiffusionDataModule"
    assert data.load_tokenizer("builtin").vocab_size == data.builtin_tokenizer().vocab_size
    assert "SortTask" in dir(data) and set(data.__all__) <= set(dir(data))
