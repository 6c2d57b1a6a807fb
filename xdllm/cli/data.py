"""``xdllm data prepare``: tokenize local files into a prepared dataset (see docs/data.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from xdllm.errors import XdllmError

log = logging.getLogger(__name__)
FORMATS = ("text", "jsonl", "prompt_response")

PREPARE_EPILOG = """\
formats (blank lines outside documents are skipped and counted):
  text             each line is one document; with --documents paragraph, lines up to a blank line
                   (joined by newlines); with --documents file, each input file (a book, say)
  jsonl            each line is a JSON object; --text-field (text) is the document
  prompt_response  each line is a JSON object with --prompt-field (prompt) and --response-field (response)

examples:
  xdllm data prepare corpus.txt -o data/corpus --tokenizer tokenizer.json
  xdllm data prepare books/*.txt -o data/books --tokenizer tokenizer.json --documents file --max-tokens 512
  xdllm data prepare pairs.jsonl -o data/pairs --tokenizer tokenizer.json --format prompt_response
  xdllm data show data/corpus      (what it holds, its first samples decoded)
  xdllm train task=prepared task.params.path=data/corpus tokenizer=tokenizer.json
"""


def add_data_parser(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="prepare datasets for training, and show what one holds",
                               description="Prepare local data for training, and show what a prepared dataset holds.")
    actions = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prepare = actions.add_parser(
        "prepare", help="tokenize local files into a memory-mapped dataset",
        description="Tokenize local files once into a prepared dataset (memory-mapped token shards with "
                    "fixed train/validation/test splits) that `task=prepared` trains on.",
        epilog=PREPARE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    prepare.add_argument("inputs", nargs="+", type=Path, metavar="INPUT", help="local source files")
    prepare.add_argument("-o", "--output", type=Path, required=True, help="folder to create")
    prepare.add_argument("--tokenizer", required=True, help="'builtin' or a local tokenizers .json file")
    prepare.add_argument("--format", default=None, choices=FORMATS,
                         help="how a line is read (default: text; a .jsonl input must name one)")
    prepare.add_argument("--documents", default="line", choices=("line", "paragraph", "file"),
                         help="text: what one document is (default: a line)")
    prepare.add_argument("--text-field", help="jsonl: the field holding the document (default: text)")
    prepare.add_argument("--prompt-field", help="prompt_response: the prompt's field (default: prompt)")
    prepare.add_argument("--response-field", help="prompt_response: the response's field (default: response)")
    prepare.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                         help="tokenizing processes (default: the CPU count)")
    prepare.add_argument("--val-fraction", type=float, default=0.01, help="share held out for validation")
    prepare.add_argument("--test-fraction", type=float, default=0.01, help="share held out for test")
    prepare.add_argument("--seed", type=int, default=0, help="seed of the held-out choice")
    prepare.add_argument("--max-tokens", type=int, default=None,
                         help="text: cut longer documents into consecutive pieces of at most this many tokens")
    show = actions.add_parser(
        "show", help="what a prepared dataset holds, and its first samples decoded",
        description="Print a prepared dataset's kind, tokenizer, sources and split sizes, what preparing it "
                    "skipped or cut, the first samples of a split decoded with its tokenizer, and the command "
                    "that trains on it.")
    show.add_argument("folder", type=Path, metavar="DIR", help="a folder `xdllm data prepare` wrote")
    show.add_argument("--split", default="train", help="the split whose samples are shown (default: train)")
    show.add_argument("--samples", type=int, default=3, help="how many samples to show (default: 3)")
    show.add_argument("--tokenizer", help="the tokenizer file, where the one it was prepared with has moved")


def source_format(given: str | None, inputs: list[Path]) -> str:
    """``--format`` as given; unset, ``text``, except that a ``.jsonl`` input is refused: its JSON
    lines would be trained on as text, braces and field names included."""
    jsonl = [path for path in inputs if path.suffix in (".jsonl", ".json")]
    if given is None and jsonl:
        raise XdllmError(f"data prepare: {jsonl[0]} is a JSON-lines file, whose lines --format text (the default) "
                         "would train on as text, braces and field names included: give --format jsonl (the "
                         "document in --text-field), --format prompt_response (--prompt-field, --response-field), "
                         "or --format text to read its lines as text")
    return given or "text"


FIELD_OPTIONS = {"text_field": ("jsonl", "text"), "prompt_field": ("prompt_response", "prompt"),
                 "response_field": ("prompt_response", "response")}
"""Each field option: the format that reads it, and its default."""


def record_fields(arguments: argparse.Namespace, record_format: str) -> dict[str, str]:
    """The field options, defaults filled in; one given for another format (which would ignore it)
    is refused."""
    fields = {}
    for name, (reader, default) in FIELD_OPTIONS.items():
        given = getattr(arguments, name)
        if given is not None and reader != record_format:
            raise XdllmError(f"data prepare: --{name.replace('_', '-')} is for --format {reader}; --format "
                             f"{record_format} does not read it")
        fields[name] = default if given is None else given
    return fields


def run_data_command(arguments: argparse.Namespace) -> int:
    if arguments.data_command == "show":
        return _show(arguments)
    from xdllm.data.prepare import PrepareOptions, prepare
    from xdllm.data.source_records import RecordFormat

    read_as = source_format(arguments.format, arguments.inputs)
    record_format = RecordFormat(read_as, **record_fields(arguments, read_as), documents=arguments.documents)
    summary = prepare(PrepareOptions(
        inputs=arguments.inputs, output=arguments.output, tokenizer=arguments.tokenizer,
        record_format=record_format, workers=arguments.workers, val_fraction=arguments.val_fraction,
        test_fraction=arguments.test_fraction, seed=arguments.seed, max_tokens=arguments.max_tokens))
    if summary["skipped_empty_lines"]:
        log.info("skipped %d empty lines", summary["skipped_empty_lines"])
    if summary["cut_documents"]:
        log.info("cut %d documents longer than --max-tokens=%d into pieces", summary["cut_documents"],
                 arguments.max_tokens)
    if summary["unknown_tokens"]:
        log.warning("%d tokens are the tokenizer's unknown token: its vocabulary does not cover the data",
                    summary["unknown_tokens"])
    print(json.dumps(summary, indent=2))
    log.info("train on it: %s", train_command(summary, arguments.tokenizer))
    return 0


def _show(arguments: argparse.Namespace) -> int:
    from xdllm.data.prepared_view import describe_prepared, open_prepared

    data = open_prepared(arguments.folder)
    print("\n".join(describe_prepared(data, arguments.split, arguments.samples, arguments.tokenizer)))
    manifest = data.manifest
    summary = {"output": str(arguments.folder), "kind": manifest["kind"],
               "samples": {split: info["samples"] for split, info in manifest["splits"].items()}}
    tokenizer = arguments.tokenizer or manifest["tokenizer"]["source"]
    missing = tokenizer != "builtin" and not Path(tokenizer).expanduser().is_file()
    where = f" (with tokenizer= where {tokenizer} is now)" if missing else ""
    print(f"\ntrain on it{where}: {train_command(summary, tokenizer)}")
    return 0


def train_command(summary: dict, tokenizer: str) -> str:
    """The ``xdllm train`` line for a prepared dataset: packed rows for text, EOS fill of the
    responses for pairs (answers of varying length, generated on a canvas of max_new_tokens masks),
    and wherever the data outgrows a default (``configs/train.yaml``, the mlm family's configs):
    the held-out sample counts and free-text samples where a split is smaller (0 test samples
    without a test split), the packed rows' length where a text (with bos and eos) is longer than
    a row (it would be trained in pieces), and the model's positions where the longest sequence
    needs more."""
    from omegaconf import OmegaConf

    from xdllm.config.compose import ROOT_CONFIG_DIR
    from xdllm.config.override_text import command, override
    from xdllm.data.prepared_store import read_manifest
    from xdllm.registry import discover_families

    defaults = OmegaConf.load(ROOT_CONFIG_DIR / "train.yaml")
    mlm_configs = discover_families()["mlm"].family.config_dir
    splits = read_manifest(summary["output"])["splits"].values()
    longest = 2 + max(split["longest_prompt"] for split in splits) + max(split["longest_target"] for split in splits)
    words = ["xdllm", "train", "task=prepared", override("task.params.path", summary["output"]),
             override("tokenizer", tokenizer)]
    if summary["kind"] == "text":
        words.append("collator=packed_mlm")
        if longest > OmegaConf.load(mlm_configs / "collator" / "packed_mlm.yaml").train.row_length:
            words += [f"collator.train.row_length={longest}", f"collator.val.row_length={longest}"]
    else:
        words.append("mlm.target_length=${derived.max_new_tokens}")
    for split, key in (("validation", "num_val_samples"), ("test", "num_test_samples")):
        if 0 < summary["samples"][split] < defaults.data[key] or (split == "test" and not summary["samples"][split]):
            words.append(f"data.{key}={summary['samples'][split]}")  # no test split: no generation after training
    if longest > OmegaConf.load(mlm_configs / "model" / "mlm.yaml").model.max_positions:
        words.append(f"model.max_positions={longest}")
    return command(*words)
