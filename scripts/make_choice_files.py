"""Write the multiple-choice files of experiments/multiple_choice.md (``xdllm eval
prompts_file=...`` scores them by likelihood).

    python scripts/make_choice_files.py sort runs/sort_mlm/generate/<time>/predictions.jsonl -o sort_choices.jsonl
    python scripts/make_choice_files.py stories experiments/data/stories.txt -o stories_choices.jsonl

``sort``: one question per test sample of a sort run's generation (its prompt and target), four
choices: the sorted digits, the same with two neighbours swapped (the right digits, not sorted),
with one digit changed (sorted, other digits), and the prompt itself.

``stories``: one question per story of the last 300 lines of the corpus (seen in training),
whose ending ``then <name> left the <place> .`` is to be chosen among the right one, another
name, another place and both other: whether the model keeps track of who went where.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

ENDING = re.compile(r"^(.*) then (\w+) left the (\w+) \.$")


def sort_questions(predictions: Path, rng: random.Random) -> list[dict]:
    questions = []
    for line in predictions.read_text().splitlines():
        record = json.loads(line)
        right = record["target"].split()
        neighbours = next((i for i in range(len(right) - 1) if right[i] != right[i + 1]), None)
        if neighbours is None:
            continue
        swapped = right[:]
        swapped[neighbours], swapped[neighbours + 1] = swapped[neighbours + 1], swapped[neighbours]
        changed = right[:]
        position = rng.randrange(len(right))
        changed[position] = str((int(changed[position]) + 1 + rng.randrange(9)) % 10)
        changed.sort()
        choices = [right, swapped, *([changed] if changed != right else []),
                   *([record["prompt"].split()] if record["prompt"].split() != right else [])]
        rng.shuffle(choices)
        questions.append({"prompt": record["prompt"], "choices": [" ".join(choice) for choice in choices],
                          "answer": choices.index(right)})
    return questions


def story_questions(corpus: Path, rng: random.Random, count: int = 300) -> list[dict]:
    lines = corpus.read_text().splitlines()
    endings = [match for match in map(ENDING.match, lines) if match]
    names, places = sorted({m[2] for m in endings}), sorted({m[3] for m in endings})
    questions = []
    for line in lines[-count:]:
        match = ENDING.match(line)
        if not match:
            continue
        prompt, name, place = match[1], match[2], match[3]
        other_name = rng.choice([n for n in names if n != name])
        other_place = rng.choice([p for p in places if p != place])
        choices = [(name, place), (other_name, place), (name, other_place), (other_name, other_place)]
        rng.shuffle(choices)
        questions.append({"prompt": prompt, "choices": [f" then {who} left the {where} ." for who, where in choices],
                          "answer": choices.index((name, place))})
    return questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("sort", "stories"))
    parser.add_argument("source", type=Path, help="a sort run's predictions.jsonl, or the stories corpus")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    questions = (sort_questions if args.kind == "sort" else story_questions)(args.source, rng)
    args.output.write_text("".join(json.dumps(question) + "\n" for question in questions))
    print(f"{len(questions)} questions in {args.output}")


if __name__ == "__main__":
    main()
