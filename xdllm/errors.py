"""The one exception type the CLI turns into a single ``xdllm: error: ...`` line."""


class XdllmError(Exception):
    """A user-facing error: bad override, unknown name, missing file. Message says what and where."""
