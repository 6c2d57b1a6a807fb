"""``xdllm tokenizer show TOKENIZER [TEXT ...] [--file CORPUS]``: what a tokenizer is (its size,
special tokens, fingerprint), how it cuts a text into tokens, and how many tokens the lines of a
corpus make (to choose a row length or ``model.max_positions``, and to see text its vocabulary
does not cover)."""

from __future__ import annotations

from pathlib import Path

from xdllm.counted import counted
from xdllm.data.tokenizer import HFTokenizerFile, SymbolTokenizer, load_tokenizer, token_display
from xdllm.data.utf8_text import decode_utf8
from xdllm.errors import XdllmError, os_error_text

ROLES = ("pad", "mask", "bos", "eos")


def open_tokenizer(source: str) -> SymbolTokenizer | HFTokenizerFile:
    """``builtin`` or a tokenizer file; one that cannot be read is one line naming it."""
    try:
        return load_tokenizer(source)
    except (OSError, ValueError) as error:
        raise XdllmError(str(error)) from error


def tokenizer_line(tokenizer: SymbolTokenizer | HFTokenizerFile, source: str) -> str:
    """``tk.json: 400 tokens; <pad> 0, <mask> 1, <bos> 2, <eos> 3; unknown text: <unk> 4; fingerprint ...``."""
    shown = token_display(tokenizer)
    special = ", ".join(f"{shown(getattr(tokenizer, f'{role}_token_id'))} {getattr(tokenizer, f'{role}_token_id')}"
                        for role in ROLES)
    unknown = getattr(tokenizer, "unk_token_id", None)
    if isinstance(tokenizer, SymbolTokenizer):
        covers = "an unknown symbol is refused"
    elif unknown is None:
        covers = "any text (no unknown token)"
    else:
        covers = f"text outside its vocabulary becomes {shown(unknown)} {unknown}"
    return (f"{source}: {tokenizer.vocab_size:,} tokens; {special}; {covers}; fingerprint "
            f"{tokenizer.fingerprint[:12]}")


def text_lines(tokenizer: SymbolTokenizer | HFTokenizerFile, text: str) -> list[str]:
    """``text`` and the tokens it encodes to, each as the text it stands for and its id."""
    try:
        ids = tokenizer.encode(text)
    except ValueError as error:
        raise XdllmError(str(error)) from error
    shown = token_display(tokenizer)
    unknown = getattr(tokenizer, "unk_token_id", None)
    tokens = "  ".join(f"{shown(token_id)!r} {token_id}{' (unknown)' if token_id == unknown else ''}"
                       for token_id in ids)
    return [f"{text!r}: {counted(len(ids), 'token')}", f"  {tokens}"]


def corpus_lines(tokenizer: SymbolTokenizer | HFTokenizerFile, path: Path) -> list[str]:
    """How many tokens the non-blank lines of ``path`` make: in all, per line (mean, the longest,
    and the share of lines longer than a few row lengths), per word, and unknown ones."""
    if path.suffix in (".jsonl", ".json"):
        raise XdllmError(f"--file {path} is a JSON file, whose lines would be counted as text, braces and field "
                         "names included: give a text file, one document per line")
    try:
        content = path.read_bytes()
    except OSError as error:
        raise XdllmError(f"--file {path}: {os_error_text(error)}") from error
    lines = [line for line in decode_utf8(content, path).splitlines() if line.strip()]
    if not lines:
        raise XdllmError(f"--file {path} has no line of text")
    try:
        encoded = tokenizer.encode_batch(lines)
    except ValueError as error:
        raise XdllmError(f"--file {path}: {error}") from error
    counts = [len(ids) for ids in encoded]
    unknown = getattr(tokenizer, "unk_token_id", None)
    unknown_count = 0 if unknown is None else sum(ids.count(unknown) for ids in encoded)
    tokens, words = sum(counts), sum(len(line.split()) for line in lines)
    longest = max(counts)
    longer = ", ".join(f"{sum(count + 2 > length for count in counts) / len(lines):.1%} over {length}"
                       for length in (64, 128, 256, 512) if length < longest + 2)
    return [f"{path}: {len(lines):,} lines, {tokens:,} tokens: {tokens / len(lines):.1f} per line (the longest "
            f"{longest:,}), {tokens / max(words, 1):.2f} per word; {unknown_count:,} unknown",
            f"  with <bos> and <eos>, lines of {longest + 2:,} tokens at most{': ' + longer if longer else ''}"]
