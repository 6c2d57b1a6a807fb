"""The one exception type the CLI turns into a single ``xdllm: error: ...`` line."""


def os_error_text(error: OSError) -> str:
    """An OSError as one line says it: its reason and, when it names one, the file
    (``No space left on device: runs/x/checkpoints/last.ckpt``)."""
    return f"{error.strerror or error}: {error.filename}" if error.filename else f"{error.strerror or error}"


class XdllmError(Exception):
    """A user-facing error: bad override, unknown name, missing file. Message says what and where."""


class CollateError(XdllmError):
    """A collator refused samples of the run's data (longer than its ``max_length``, or than an EOS
    fill's slots). Raised in a loader worker, the main process builds it again from the worker's
    whole traceback; the message keeps only the collator's words (the traceback's last line)."""

    def __init__(self, message: str) -> None:
        said = message.rstrip().splitlines()[-1].partition(f"{type(self).__name__}: ")[2] if message else ""
        super().__init__(said or message)


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM while an xdllm command runs (:mod:`xdllm.cli.terminate`)."""
