"""Tokenizers that need no download: a built-in symbol tokenizer and a local HF JSON file.

Both satisfy :class:`xdllm.interfaces.Tokenizer`. The built-in one serves the synthetic tasks of
:mod:`xdllm.data.builtin_tasks` (one token per whitespace-separated symbol); :class:`HFTokenizerFile`
wraps any Hugging Face ``tokenizers`` JSON on disk for real text.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable, Sequence
from pathlib import Path

import tokenizers

from xdllm.tokenizer_protocol import Tokenizer

PAD_TOKEN = "<pad>"
MASK_TOKEN = "<mask>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
SPECIAL_TOKENS = (PAD_TOKEN, MASK_TOKEN, BOS_TOKEN, EOS_TOKEN)
"""The special tokens, in id order: pad = 0, mask = 1, bos = 2, eos = 3 in :class:`SymbolTokenizer`."""

BUILTIN_SYMBOLS = tuple(string.digits) + tuple(string.ascii_lowercase) + ("+", "=", ">", ",", "|", ":")
"""Symbols of the built-in tokenizer: digits, lowercase letters, and the tasks' operators."""
KNOWN_SYMBOLS_SHOWN = 48
"""Symbols an unknown symbol's error lists (the built-in tokenizer's 42 all fit)."""


class SymbolTokenizer:
    """One token per whitespace-separated symbol; ids 0-3 are ``<pad> <mask> <bos> <eos>``.

    ``encode("3 1 4")`` gives the ids of ``3``, ``1`` and ``4``; an unknown symbol is a
    ``ValueError`` naming it and its position. ``decode`` joins symbols with single spaces.
    """

    pad_token_id = 0
    mask_token_id = 1
    bos_token_id = 2
    eos_token_id = 3

    def __init__(self, symbols: Sequence[str]) -> None:
        self._tokens = list(SPECIAL_TOKENS)
        for position, symbol in enumerate(symbols):
            if not symbol or any(char.isspace() for char in symbol):
                raise ValueError(f"SymbolTokenizer: symbol {symbol!r} at position {position} is empty "
                                 "or contains whitespace")
            if symbol in self._tokens:
                raise ValueError(f"SymbolTokenizer: symbol {symbol!r} at position {position} is a "
                                 "duplicate or a special token")
            self._tokens.append(symbol)
        self._ids = {token: token_id for token_id, token in enumerate(self._tokens)}

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset(range(len(SPECIAL_TOKENS)))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the vocabulary in id order: equal exactly when the two encode alike."""
        return hashlib.sha256("\n".join(["symbols", *self._tokens]).encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        ids = []
        for position, symbol in enumerate(text.split()):
            token_id = self._ids.get(symbol)
            if token_id is None:
                raise ValueError(f"SymbolTokenizer.encode: unknown symbol {symbol!r} at position {position}; "
                                 f"{self._known_symbols()}")
            ids.append(token_id)
        return ids

    def _known_symbols(self) -> str:
        """What the tokenizer knows, for its refusal: text in other words needs a tokenizer file."""
        symbols = self._tokens[len(SPECIAL_TOKENS):]
        shown = " ".join(symbols[:KNOWN_SYMBOLS_SHOWN]) + (" ..." if len(symbols) > KNOWN_SYMBOLS_SHOWN else "")
        return (f"it knows {len(symbols)} symbols, each a whitespace-separated word ({shown}); for other text "
                "train a tokenizer file (xdllm tokenizer train CORPUS -o tokenizer.json) and give it instead")

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text; an unknown symbol is the ``ValueError`` of ``encode``."""
        ids = self._ids
        try:
            return [[ids[symbol] for symbol in text.split()] for text in texts]
        except KeyError:
            return [self.encode(text) for text in texts]  # raises, naming the symbol and its position

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        special = self.special_token_ids
        return " ".join(self.id_to_token(int(token_id)) for token_id in ids
                        if not (skip_special_tokens and int(token_id) in special))

    def id_to_token(self, token_id: int) -> str:
        if not 0 <= token_id < len(self._tokens):
            raise ValueError(f"SymbolTokenizer.id_to_token: id {token_id} outside [0, {len(self._tokens)})")
        return self._tokens[token_id]


def builtin_tokenizer() -> SymbolTokenizer:
    """The tokenizer of the built-in tasks (see :data:`BUILTIN_SYMBOLS`)."""
    return SymbolTokenizer(BUILTIN_SYMBOLS)


class HFTokenizerFile:
    """A local Hugging Face ``tokenizers`` JSON file, with named pad/mask/bos/eos tokens.

    Never downloads. ``encode`` adds no special tokens (collators add bos/eos themselves);
    ``decode(skip_special_tokens=True)`` drops the four special ids and whatever the file marks
    as special.
    """

    def __init__(self, path: str | Path, pad_token: str = PAD_TOKEN, mask_token: str = MASK_TOKEN,
                 bos_token: str = BOS_TOKEN, eos_token: str = EOS_TOKEN, serialized: str | None = None) -> None:
        """``serialized``: the file's content (:meth:`serialized`, as a checkpoint stores it), read
        instead of the file; ``path`` then only names where it came from."""
        self.path = Path(path)
        if serialized is None and not self.path.is_file():
            raise FileNotFoundError(f"HFTokenizerFile: tokenizer file {self.path} does not exist")
        try:
            self._tokenizer = (tokenizers.Tokenizer.from_str(serialized) if serialized is not None
                               else tokenizers.Tokenizer.from_file(str(self.path)))
        except Exception as error:
            raise ValueError(f"HFTokenizerFile: {self.path} is not a readable tokenizers JSON file "
                             f"({' '.join(str(error).split())})") from error
        roles = {"pad_token": pad_token, "mask_token": mask_token, "bos_token": bos_token, "eos_token": eos_token}
        ids = {role: self._tokenizer.token_to_id(token) for role, token in roles.items()}
        missing = [f"{role} {roles[role]!r}" for role, token_id in ids.items() if token_id is None]
        if missing:
            raise ValueError(f"HFTokenizerFile: {self.path} lacks special tokens xdllm needs, not in its vocabulary: "
                             f"{', '.join(missing)}; train a tokenizer that has them (xdllm tokenizer train CORPUS "
                             "-o tokenizer.json), or add them to this file (tokenizers: Tokenizer.add_special_tokens, "
                             "then save)")
        self.pad_token_id, self.mask_token_id = ids["pad_token"], ids["mask_token"]
        self.bos_token_id, self.eos_token_id = ids["bos_token"], ids["eos_token"]
        self._as_text: tokenizers.Tokenizer | None = None  # made on first use: encode_batch_as_text

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def serialized(self) -> str:
        """The tokenizer as its JSON text: ``HFTokenizerFile(path, serialized=...)`` is this tokenizer."""
        return self._tokenizer.to_str()

    @property
    def unk_token_id(self) -> int | None:
        """The id text the vocabulary cannot represent becomes, if the model has one."""
        token = getattr(self._tokenizer.model, "unk_token", None)
        return self._tokenizer.token_to_id(token) if token else None

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset((self.pad_token_id, self.mask_token_id, self.bos_token_id, self.eos_token_id))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the tokenizer's canonical serialization (vocabulary, merges, normalizer,
        pre-tokenizer, ...) and the special-token ids: the same for the same tokenizer saved
        anywhere, different when anything that changes encoding differs."""
        special = f"{self.pad_token_id},{self.mask_token_id},{self.bos_token_id},{self.eos_token_id}"
        return hashlib.sha256(f"{self._tokenizer.to_str()}\n{special}".encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def unknown_pieces(self, text: str) -> list[str]:
        """The pieces of ``text`` that encode to the unknown token (none when the model has none,
        as a byte-level BPE has not)."""
        unknown = self.unk_token_id
        if unknown is None:
            return []
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return [text[start:end] for token, (start, end) in zip(encoding.ids, encoding.offsets) if token == unknown]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text, in one call into ``tokenizers``: ``encode_batch_fast``
        (no character offsets, the same ids) where the installed version has it."""
        return self._encode_batch(self._tokenizer, texts)

    def encode_batch_as_text(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode_batch``, but the text of a special token (``<mask>`` in a line about
        tokenizers) is encoded as ordinary characters, not as the token: for training text
        (:mod:`xdllm.data.text_encoding`)."""
        if self._as_text is None:
            self._as_text = tokenizers.Tokenizer.from_str(self._tokenizer.to_str())
            self._as_text.encode_special_tokens = True
        return self._encode_batch(self._as_text, texts)

    @staticmethod
    def _encode_batch(tokenizer: tokenizers.Tokenizer, texts: Sequence[str]) -> list[list[int]]:
        encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        return [encoding.ids for encoding in encode(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        ids = [int(token_id) for token_id in ids]
        if skip_special_tokens:
            special = self.special_token_ids
            ids = [token_id for token_id in ids if token_id not in special]
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        token = self._tokenizer.id_to_token(token_id)
        if token is None:
            raise ValueError(f"HFTokenizerFile.id_to_token: id {token_id} is not in the vocabulary of "
                             f"{self.path}")
        return token

    def display_token(self, token_id: int) -> str:
        """The token as the text it decodes to (byte-level BPE's ``Ġthe`` is `` the``), for views;
        the stored string where decoding alone gives nothing readable (no text, or a piece of a
        multi-byte character)."""
        token = self.id_to_token(token_id)
        text = self._tokenizer.decode([token_id], skip_special_tokens=False)
        if text == "" or ("\ufffd" in text and "\ufffd" not in token):
            return token
        return text


def token_display(tokenizer: Tokenizer) -> Callable[[int], str]:
    """How views show a token id: the tokenizer's ``display_token`` (the text the token stands
    for) where it has one, else its vocabulary string (``id_to_token``)."""
    return getattr(tokenizer, "display_token", tokenizer.id_to_token)


def load_tokenizer(name_or_path: str | Path) -> SymbolTokenizer | HFTokenizerFile:
    """``"builtin"`` for :func:`builtin_tokenizer`, or the path of a local tokenizer ``.json``."""
    if str(name_or_path) == "builtin":
        return builtin_tokenizer()
    if Path(name_or_path).suffix == ".json":
        return HFTokenizerFile(name_or_path)
    raise ValueError(f"load_tokenizer: expected 'builtin' or a path to a tokenizers .json file, "
                     f"got {str(name_or_path)!r}")
