"""A run trained with a tokenizer file stores the file's content in every checkpoint.

Generation, evaluation and a resumed training then encode and decode with the tokenizer the
weights were trained with, wherever the checkpoint is copied, whether or not the file is still at
the path the run recorded (``config.tokenizer``), and even if it was overwritten since. The
built-in tokenizer is defined by the code and is not stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from xdllm.data.tokenizer import HFTokenizerFile, load_tokenizer
from xdllm.errors import XdllmError
from xdllm.interfaces import Tokenizer

TOKENIZER_KEY = "xdllm_tokenizer"
"""The checkpoint entry holding the tokenizer file's JSON text."""


def tokenizer_record(tokenizer: Tokenizer) -> dict[str, str]:
    """The checkpoint entries that store ``tokenizer``: a tokenizer file's JSON text; none for
    the built-in tokenizer."""
    if isinstance(tokenizer, HFTokenizerFile):
        return {TOKENIZER_KEY: tokenizer.serialized()}
    return {}


def resumed_tokenizer(config: DictConfig, tokenizer_json: str | None) -> tuple[HFTokenizerFile | None, str | None]:
    """The tokenizer a resumed run continues with: the one its checkpoint stores (``tokenizer_json``),
    whatever ``config.tokenizer`` now holds, so that a resumed run never changes vocabulary; and a
    line to log when the tokenizer ``config.tokenizer`` names is another one (rewritten since the
    run started, gone, or another given). (None, None) for a checkpoint that stores none."""
    if tokenizer_json is None:
        return None, None
    stored = HFTokenizerFile(config.tokenizer, serialized=tokenizer_json)
    try:
        given = load_tokenizer(config.tokenizer).fingerprint
    except (ValueError, FileNotFoundError):
        given = None
    if given == stored.fingerprint:
        return stored, None
    gone = given is None and not Path(str(config.tokenizer)).exists()
    what = "is gone" if gone else "is not the tokenizer this run trained with"
    return stored, (f"tokenizer={config.tokenizer} {what}; the run continues with its own, which its checkpoints "
                    "store")


def stored_tokenizer(checkpoint: Mapping[str, Any], config: DictConfig, source: Path) -> HFTokenizerFile | None:
    """The tokenizer ``checkpoint`` (read from ``source``) stores, named by the path the run
    recorded; None for a checkpoint that stores none (the built-in tokenizer, or a checkpoint
    written before checkpoints stored tokenizers: their file is read)."""
    text = checkpoint.get(TOKENIZER_KEY)
    if text is None:
        return None
    try:
        return HFTokenizerFile(config.tokenizer, serialized=text)
    except ValueError as error:
        raise XdllmError(f"{source}: the tokenizer it stores cannot be read: {error}") from error
