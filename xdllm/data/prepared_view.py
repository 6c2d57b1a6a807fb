"""``xdllm data show DIR``: what a prepared dataset holds, to check it before a long run: its
kind, tokenizer and sources, each split's size, what preparing it skipped or cut, and the first
samples of a split decoded with the tokenizer it was prepared with (its recorded file, or one
given for a file that moved, checked against the recorded fingerprint)."""

from __future__ import annotations

from pathlib import Path

from xdllm.counted import counted, shortened
from xdllm.data.prepared_store import SPLITS, PreparedData
from xdllm.data.tokenizer import load_tokenizer
from xdllm.errors import XdllmError
from xdllm.interfaces import Tokenizer

SHOWN_CHARACTERS = 300
"""A sample's text is cut after this many characters (saying how many more there were)."""


def open_prepared(folder: str | Path) -> PreparedData:
    """The prepared dataset in ``folder``; a folder that is none (or not one this xdllm reads) is one line."""
    try:
        return PreparedData(folder)
    except ValueError as error:
        raise XdllmError(str(error)) from error


def dataset_lines(data: PreparedData) -> list[str]:
    """The manifest in a few lines: kind, tokenizer, sources, a table of the splits, the counts."""
    manifest = data.manifest
    recorded = manifest["tokenizer"]
    sources = manifest["sources"]
    kind = "prompt/response pairs" if data.kind == "prompt_response" else "text documents"
    lines = [f"{data.folder}: {kind}, prepared {manifest['created']} from {counted(len(sources), 'file')} "
             f"({', '.join(source['path'] for source in sources)})",
             f"tokenizer: {recorded['source']} ({counted(recorded['vocab_size'], 'token')}, fingerprint "
             f"{recorded['fingerprint'][:12]}), ids stored as {manifest['token_dtype']}",
             f"{'split':<12}{'samples':>10}{'tokens':>12}{'longest prompt':>16}{'longest target':>16}"]
    for split in SPLITS:
        info = data.split_info(split)
        lines.append(f"{split:<12}{info['samples']:>10,}{info['tokens']:>12,}{info['longest_prompt']:>16,}"
                     f"{info['longest_target']:>16,}")
    max_tokens = manifest["options"]["max_tokens"]
    cut = f", cut {counted(manifest['cut_documents'], 'document')} longer than --max-tokens {max_tokens}" if (
        max_tokens) else ""
    lines.append(f"skipped {counted(manifest['skipped_empty_lines'], 'empty line')}{cut}, "
                 f"{counted(manifest['unknown_tokens'], 'unknown token')}")
    return lines


def dataset_tokenizer(data: PreparedData, given: str | None) -> tuple[Tokenizer | None, str]:
    """The tokenizer the data was prepared with: ``given`` (refused unless it is that tokenizer),
    else the recorded one; None and why where the recorded file cannot be read."""
    recorded = data.manifest["tokenizer"]
    source = given or recorded["source"]
    try:
        tokenizer = load_tokenizer(source)
    except (OSError, ValueError, XdllmError) as error:
        if given is not None:
            raise XdllmError(f"--tokenizer {given}: {error}") from error
        return None, f"its tokenizer {source} cannot be read ({error}): --tokenizer FILE decodes them"
    if tokenizer.fingerprint != recorded["fingerprint"]:
        raise XdllmError(f"--tokenizer {source} is not the tokenizer {data.folder} was prepared with (fingerprint "
                         f"{tokenizer.fingerprint[:12]}, not {recorded['fingerprint'][:12]}): its ids would decode "
                         "to other text")
    return tokenizer, ""


def _shown(ids: list[int], tokenizer: Tokenizer | None) -> str:
    if tokenizer is None:
        return " ".join(map(str, ids))
    return repr(shortened(tokenizer.decode(ids, skip_special_tokens=False), SHOWN_CHARACTERS))


def sample_lines(data: PreparedData, split: str, count: int, tokenizer: Tokenizer | None) -> list[str]:
    """The first ``count`` stored samples of ``split``: prompt and response of a pair, the text of
    a document (token ids where ``tokenizer`` is None)."""
    stored = data.split(split)
    lines = []
    for index in range(min(count, len(stored))):
        prompt, target = stored.sample(index)
        if data.kind == "prompt_response":
            lines += [f"{split} {index}: prompt ({counted(len(prompt), 'token')}) {_shown(prompt, tokenizer)}",
                      f"{'':>{len(split) + len(str(index)) + 2}} response ({counted(len(target), 'token')}) "
                      f"{_shown(target, tokenizer)}"]
        else:
            lines.append(f"{split} {index} ({counted(len(target), 'token')}): {_shown(target, tokenizer)}")
    return lines


def describe_prepared(data: PreparedData, split: str = "train", samples: int = 3,
                      tokenizer: str | None = None) -> list[str]:
    """What ``xdllm data show`` prints for the prepared dataset ``data``. A ``tokenizer`` given is
    checked even where nothing is decoded (the command's train line names it)."""
    if split not in SPLITS:
        raise XdllmError(f"--split {split!r}: a prepared dataset's splits are {', '.join(SPLITS)}")
    if samples < 0:
        raise XdllmError(f"--samples must be 0 or more, got {samples}")
    held = data.split_info(split)["samples"]
    decoding = samples and held
    decoder, unread = dataset_tokenizer(data, tokenizer) if decoding or tokenizer is not None else (None, "")
    lines = dataset_lines(data)
    if decoding:
        which = ("its one sample" if held == 1 else f"all {held} samples") if samples >= held else (
            f"the first {counted(samples, 'sample')}")
        lines += ["", f"{which} of {split}{', as token ids: ' + unread if unread else ''}:"]
        lines += sample_lines(data, split, samples, decoder)
    return lines
