"""Write a small local text corpus and a word-level tokenizer for it, from a seed.

The corpus is made of short stories from a probabilistic grammar with dependencies a language
model can learn at several ranges: a name fixes the pronoun of later sentences ("mia ... she"),
a subject's number fixes its verb form ("the dog runs" / "the dogs run"), a place named in the
first sentence comes back in the last, and word choice follows topic. Nothing is downloaded.

The tokenizer is a Hugging Face ``tokenizers`` WordLevel model over whitespace and punctuation,
with xdllm's special tokens (``<pad> <mask> <bos> <eos>``) and ``<unk>``, trained on the corpus.

Usage: ``python scripts/make_text_corpus.py [--lines 6000] [--seed 0] [--out experiments/data]``
writes ``<out>/stories.txt`` and ``<out>/stories_tokenizer.json`` (atomically) and prints one
JSON line with their sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from xdllm.data.tokenizer import SPECIAL_TOKENS

NAMES = {"she": ["mia", "ana", "lena", "sara", "nora"], "he": ["tom", "ben", "leo", "sam", "max"]}
ANIMALS = ["dog", "cat", "bird", "fox", "horse", "rabbit"]
PLACES = ["the park", "the river", "the forest", "the market", "the garden", "the hill"]
ADJECTIVES = ["small", "big", "happy", "quiet", "brown", "old", "young", "clever"]
VERBS = {"runs": "run", "jumps": "jump", "sleeps": "sleep", "sings": "sing", "waits": "wait", "plays": "play"}
FEELINGS = ["happy", "tired", "hungry", "calm", "excited"]
OBJECTS = ["a ball", "a book", "an apple", "a stick", "a red kite", "some bread"]


def animal_sentence(rng: random.Random) -> str:
    """A subject and a verb that agree in number."""
    animal, (singular, plural) = rng.choice(ANIMALS), rng.choice(list(VERBS.items()))
    adjective = rng.choice(ADJECTIVES)
    if rng.random() < 0.5:
        return f"the {adjective} {animal} {singular} ."
    return f"the {adjective} {animal}s {plural} ."


def story(rng: random.Random) -> str:
    """One line: a character at a place, what happens, how they feel, back to the place."""
    pronoun = rng.choice(list(NAMES))
    name, place = rng.choice(NAMES[pronoun]), rng.choice(PLACES)
    possessive = "her" if pronoun == "she" else "his"
    sentences = [f"{name} went to {place} with {possessive} {rng.choice(ANIMALS)} ."]
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.4:
            sentences.append(animal_sentence(rng))
        elif kind < 0.7:
            sentences.append(f"{pronoun} found {rng.choice(OBJECTS)} there .")
        else:
            sentences.append(f"{pronoun} was {rng.choice(FEELINGS)} .")
    sentences.append(f"then {name} left {place} .")
    return " ".join(sentences)


def train_tokenizer(corpus: Path) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                       pre_tokenizers.Punctuation()])
    trainer = trainers.WordLevelTrainer(special_tokens=[*SPECIAL_TOKENS, "<unk>"])
    tokenizer.train([str(corpus)], trainer)
    return tokenizer


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/data"))
    args = parser.parse_args(argv)
    if args.lines < 1:
        parser.error(f"--lines must be >= 1, got {args.lines}")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    corpus = args.out / "stories.txt"
    write_atomically(corpus, "\n".join(story(rng) for _ in range(args.lines)) + "\n")
    tokenizer_path = args.out / "stories_tokenizer.json"
    write_atomically(tokenizer_path, train_tokenizer(corpus).to_str())
    vocab = Tokenizer.from_file(str(tokenizer_path)).get_vocab_size()
    print(json.dumps({"corpus": str(corpus), "lines": args.lines, "bytes": corpus.stat().st_size,
                      "tokenizer": str(tokenizer_path), "vocab_size": vocab}))


if __name__ == "__main__":
    main()
