"""A DataLoader worker killed mid-handover: the descriptor-sharing thread's connection error is
dropped, every other exception still reaches the previous hook."""

import sys

import pytest

from xdllm.data.fd_sharing import QuietSharerResets, quiet_sharer_resets

SHARER = "/usr/lib/python3.11/multiprocessing/resource_sharer.py"


def _raised_in(filename: str, error: BaseException) -> tuple:
    try:
        exec(compile("raise error", filename, "exec"), {"error": error})
    except BaseException as raised:
        return type(raised), raised, raised.__traceback__
    raise AssertionError("not raised")


@pytest.mark.parametrize("error", [ConnectionResetError(104), BrokenPipeError(32), ConnectionAbortedError(103)])
def test_a_connection_error_of_the_sharing_thread_is_dropped(error):
    seen = []
    QuietSharerResets(lambda *args: seen.append(args))(*_raised_in(SHARER, error))
    assert seen == []


def test_every_other_exception_reaches_the_previous_hook():
    seen = []
    hook = QuietSharerResets(lambda *args: seen.append(args))
    elsewhere = _raised_in("/work/other.py", ConnectionResetError(104))
    other_error = _raised_in(SHARER, ValueError("x"))
    hook(*elsewhere)
    hook(*other_error)
    assert seen == [elsewhere, other_error]


def test_installing_twice_wraps_once(monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    quiet_sharer_resets()
    quiet_sharer_resets()
    assert isinstance(sys.excepthook, QuietSharerResets)
    assert sys.excepthook.previous is sys.__excepthook__
