"""Training text is text: a corpus (``task=text_file``, ``xdllm data prepare``) that mentions a
special token, ``<mask>``, ``<eos>``, ``<pad>`` in a line about tokenizers say, holds those
characters, not the control tokens.

A tokenizer's ``encode`` reads the text of a special token as that token, which is what a prompt
needs (``<mask>`` in a prompt asks for infilling); in a corpus it put a mask, an EOS or padding
inside a document, and decoding dropped the words. :func:`encode_as_text` reads such text as
ordinary characters, and refuses a tokenizer that cannot (the built-in symbol tokenizer, whose
word ``<mask>`` is only the mask token)."""

from __future__ import annotations

from collections.abc import Sequence

from xdllm.tokenizer_protocol import Tokenizer


class UnencodableText(ValueError):
    """Text ``index`` of a batch could not be encoded as text (the caller names its file and line)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class SpecialTokenInText(UnencodableText):
    """Text ``index`` of a batch encoded to a special token the tokenizer cannot read as text."""


def _encoded(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    as_text = getattr(tokenizer, "encode_batch_as_text", None)
    if as_text is not None:
        return as_text(texts)
    if hasattr(tokenizer, "encode_batch"):
        return tokenizer.encode_batch(texts)
    return [tokenizer.encode(text) for text in texts]


def encode_as_text(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The ids of each text, special-token text encoded as ordinary characters (a tokenizer's
    ``encode_batch_as_text``, where it has one); a text the tokenizer refuses (a symbol the
    built-in one lacks) is :class:`UnencodableText`, and one that still encodes to a special id
    :class:`SpecialTokenInText`, each naming the text's index."""
    try:
        ids = _encoded(tokenizer, texts)
    except ValueError as error:  # one call for the batch: find the text it failed on
        for index, text in enumerate(texts):
            try:
                _encoded(tokenizer, [text])
            except ValueError as refused:
                raise UnencodableText(index, str(refused)) from error
        raise
    special = tokenizer.special_token_ids
    for index, row in enumerate(ids):
        if not special.isdisjoint(row):
            token = next(token_id for token_id in row if token_id in special)
            name = tokenizer.id_to_token(token)
            raise SpecialTokenInText(index, f"{name!r} is read as the tokenizer's special token (id {token}), not as "
                                     "text: a training sample would hold that control token inside its text; a "
                                     "tokenizer file made by xdllm tokenizer train reads it as text")
    return ids
