"""A local text file as a task: unconditional documents for real-text training.

Each non-empty line of a UTF-8 file is one document (``documents="paragraph"``: lines up to a
blank line; ``"file"``: the whole file), tokenized once by the run's tokenizer (for
real text, a local Hugging Face ``tokenizers`` JSON: ``tokenizer=/path/tokenizer.json``). A document
longer than ``max_tokens`` tokens becomes several consecutive documents of at most
``max_tokens`` tokens: nothing is truncated or dropped. The text of a special token (``<mask>``
in a line about tokenizers) is read as text (:mod:`xdllm.data.text_encoding`). Samples are documents drawn uniformly
with the sample's seeded generator; the held-out splits are the first draws of their own
generators, and training redraws any document equal to a held-out one (``xdllm.data.tasks``).
Nothing is downloaded: the path must name a local file.
"""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path
from typing import ClassVar

from xdllm.data.source_records import DOCUMENTS, split_documents
from xdllm.data.text_encoding import UnencodableText, encode_as_text
from xdllm.data.utf8_text import decode_utf8
from xdllm.interfaces import Tokenizer

logger = logging.getLogger(__name__)


class TextFileTask:
    """Documents from ``path``: ``generate_ids`` returns ``([], document token ids)``."""

    name: ClassVar[str] = "text_file"
    needs_tokenizer: ClassVar[bool] = True

    def __init__(self, path: str | Path, tokenizer: Tokenizer, max_tokens: int = 128,
                 documents: str = "line") -> None:
        if max_tokens < 1:
            raise ValueError(f"TextFileTask.max_tokens must be >= 1, got {max_tokens}")
        if documents not in DOCUMENTS:
            raise ValueError(f"documents must be one of {', '.join(DOCUMENTS)}, got {documents!r}")
        self.path = Path(path).expanduser()
        if self.path.is_dir():
            raise FileNotFoundError(f"{self.path} is a folder, not a text file")
        if not self.path.is_file():
            raise FileNotFoundError(f"no such file {self.path}")
        self.max_tokens = max_tokens
        raw = self.path.read_bytes()
        self.source_sha256 = hashlib.sha256(raw).hexdigest()
        """The file's digest: a resumed run whose corpus changed reads other samples."""
        self.documents = self._read_documents(raw, tokenizer, documents)
        if not self.documents:
            raise ValueError(f"{self.path} has no non-empty line")

    def _read_documents(self, raw: bytes, tokenizer: Tokenizer, unit: str) -> list[tuple[int, ...]]:
        documents = []
        lines = decode_utf8(raw, self.path).splitlines()
        unknown, unknown_count, first_unknown_line = getattr(tokenizer, "unk_token_id", None), 0, None
        numbered = split_documents(list(enumerate(lines, start=1)), unit)[0]
        try:
            encoded = encode_as_text(tokenizer, [text for _, text in numbered])
        except UnencodableText as error:
            raise ValueError(f"{self.path}:{numbered[error.index][0]}: {error}") from error
        for (number, _), ids in zip(numbered, encoded):
            if unknown is not None and unknown in ids:
                unknown_count += ids.count(unknown)
                first_unknown_line = first_unknown_line or number
            documents.extend(tuple(ids[start:start + self.max_tokens])
                             for start in range(0, len(ids), self.max_tokens))
        if unknown_count:
            logger.warning("text_file task: %d tokens of %s are the tokenizer's unknown token (first on "
                           "line %d): its vocabulary does not cover the corpus", unknown_count, self.path,
                           first_unknown_line)
        return documents

    @property
    def max_prompt_len(self) -> int:
        return 0

    @property
    def max_target_len(self) -> int:
        return self.max_tokens

    def generate_ids(self, rng: random.Random) -> tuple[list[int], list[int]]:
        return [], list(rng.choice(self.documents))
