"""``xdllm tokenizer train CORPUS... -o tokenizer.json``: a local tokenizer file for ``tokenizer=PATH``
(:mod:`xdllm.data.tokenizer_training`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from xdllm.data.tokenizer_training import TOKENIZER_KINDS, train_tokenizer_file


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_tokenizer_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``tokenizer`` command and its ``train`` and ``show`` subcommands."""
    parser = subparsers.add_parser("tokenizer", help="build a local tokenizer file for text runs, and show one",
                                   description="Build a local Hugging Face tokenizers file, and show how one "
                                               "encodes text.")
    commands = parser.add_subparsers(dest="tokenizer_command", metavar="{train,show}", required=True)
    train = commands.add_parser(
        "train", help="train a tokenizer on text files (nothing is downloaded)",
        description="Train a tokenizer on UTF-8 text files, with the special tokens xdllm needs "
                    "(<pad> <mask> <bos> <eos> at ids 0-3, then <unk>).",
        epilog="example:\n  xdllm tokenizer train corpus.txt -o tokenizer.json\n"
               "  xdllm train task=text_file task.params.path=corpus.txt tokenizer=tokenizer.json "
               "collator=packed_mlm",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("corpus", nargs="+", type=Path, help="text files, one document per line")
    train.add_argument("-o", "--output", type=Path, required=True, help="the tokenizer .json to write")
    train.add_argument("--kind", choices=TOKENIZER_KINDS, default="bpe",
                       help="bpe: byte-level BPE, any text (default); wordlevel: one token per word")
    train.add_argument("--vocab-size", type=_positive, default=8000,
                       help="at most this many tokens (default 8000)")
    train.add_argument("--min-frequency", type=_positive, default=2,
                       help="keep merges / words seen at least this often (default 2)")
    train.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    show = commands.add_parser(
        "show", help="a tokenizer's size and special tokens, how it cuts texts, the token counts of a corpus",
        description="Show a tokenizer (its size, special tokens, what becomes of text outside its vocabulary, "
                    "fingerprint), the tokens each TEXT encodes to, and with --file how many tokens the lines of "
                    "a corpus make.",
        epilog="examples:\n  xdllm tokenizer show tokenizer.json 'the cat sat on the mat'\n"
               "  xdllm tokenizer show tokenizer.json --file corpus.txt\n  xdllm tokenizer show builtin '1 2 + 3'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("tokenizer", metavar="TOKENIZER", help="a tokenizer .json file, or 'builtin'")
    show.add_argument("texts", nargs="*", metavar="TEXT", help="texts to encode")
    show.add_argument("--file", type=Path, help="a text file: the token counts of its lines")
    return parser


def run_tokenizer_command(args: argparse.Namespace) -> int:
    if args.tokenizer_command == "show":
        return _show(args)
    trained = train_tokenizer_file(args.corpus, args.output, kind=args.kind, vocab_size=args.vocab_size,
                                   min_frequency=args.min_frequency, overwrite=args.overwrite)
    print(f"wrote {trained.path}: {trained.kind}, {trained.vocab_size} tokens{_fewer(trained.vocab_size, args)}, "
          f"trained on {trained.corpus_lines} lines; use it with tokenizer={trained.path}")
    return 0


def _fewer(vocab_size: int, args: argparse.Namespace) -> str:
    """Why a tokenizer holds fewer tokens than ``--vocab-size`` asked for, where it does."""
    if vocab_size >= args.vocab_size:
        return ""
    seen = "pairs of tokens" if args.kind == "bpe" else "words"
    return (f" (fewer than --vocab-size {args.vocab_size}: the corpus holds no more {seen} seen at least "
            f"--min-frequency {args.min_frequency} times)")


def _show(args: argparse.Namespace) -> int:
    from xdllm.data.tokenizer_view import corpus_lines, open_tokenizer, text_lines, tokenizer_line

    tokenizer = open_tokenizer(args.tokenizer)
    lines = [tokenizer_line(tokenizer, args.tokenizer)]
    for text in args.texts:
        lines += text_lines(tokenizer, text)
    if args.file is not None:
        lines += corpus_lines(tokenizer, args.file)
    print("\n".join(lines))
    return 0
