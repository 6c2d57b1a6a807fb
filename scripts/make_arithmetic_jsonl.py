"""Arithmetic word problems as prompt/response JSONL, and a word-level tokenizer for them.

Each line is ``{"prompt": "...", "response": "..."}``: a one- or two-sentence problem (addition,
subtraction or multiplication of small numbers, three templates, names and items drawn at
random) and its answer as a number. Prompts are distinct. The tokenizer is a Hugging Face
``tokenizers`` WordLevel model over every word of the templates, with digits split one per
token (``19`` is ``1 9``), punctuation split off, and xdllm's special tokens
``<pad> <mask> <bos> <eos>``.

    python scripts/make_arithmetic_jsonl.py -o /tmp/arith/problems.jsonl --tokenizer-out /tmp/arith/tokenizer.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

NAMES = ("tom", "mia", "sam", "lena", "ben", "sara", "leo", "nora")
PRONOUNS = {"tom": "him", "sam": "him", "ben": "him", "leo": "him", "mia": "her", "lena": "her", "sara": "her",
            "nora": "her"}
ITEMS = ("apples", "books", "coins", "cards", "pencils", "stickers", "marbles", "shells")
SPECIAL_TOKENS = ("<pad>", "<mask>", "<bos>", "<eos>", "<unk>")
TEMPLATES = ("addition", "subtraction", "multiplication")


def problem(rng: random.Random) -> tuple[str, int]:
    """One word problem and its answer."""
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    kind = rng.choice(TEMPLATES)
    if kind == "addition":
        a, b = rng.randint(0, 50), rng.randint(0, 50)
        return (f"{name} has {a} {item} . {other} gives {PRONOUNS[name]} {b} more . "
                f"how many {item} does {name} have now ?"), a + b
    if kind == "subtraction":
        a = rng.randint(0, 99)
        b = rng.randint(0, a)
        return f"{name} had {a} {item} and gave {b} to {other} . how many {item} are left ?", a - b
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"{name} has {a} boxes with {b} {item} in each box . how many {item} does {name} have ?", a * b


def make_problems(count: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    problems: dict[str, str] = {}
    while len(problems) < count:
        prompt, answer = problem(rng)
        problems.setdefault(prompt, str(answer))
    return [{"prompt": prompt, "response": response} for prompt, response in problems.items()]


def make_tokenizer(problems: list[dict[str, str]]) -> Tokenizer:
    words = sorted({word for record in problems for text in record.values()
                    for word in re.findall(r"[a-z]+|[^\sa-z0-9]", text)})
    vocabulary = [*SPECIAL_TOKENS, *"0123456789", *words]
    tokenizer = Tokenizer(models.WordLevel({token: index for index, token in enumerate(vocabulary)}, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                       pre_tokenizers.Digits(individual_digits=True)])
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, required=True, help="the JSONL file to write")
    parser.add_argument("--tokenizer-out", type=Path, required=True, help="the tokenizer JSON to write")
    parser.add_argument("--count", type=int, default=6000, help="distinct problems")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    problems = make_problems(args.count, args.seed)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(json.dumps(record) + "\n" for record in problems), encoding="utf-8")
    args.tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
    make_tokenizer(problems).save(str(args.tokenizer_out))
    print(json.dumps({"problems": len(problems), "output": str(args.output), "tokenizer": str(args.tokenizer_out)}))


if __name__ == "__main__":
    main()
