"""Free-text samples against the stories corpus: distinct samples, mean length in words, and the
share of generated sentences that occur verbatim in the corpus (experiments/udlm_vs_mdlm.md).

Usage: python scripts/udlm_text_stats.py <predictions.jsonl>...
"""

import argparse
import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "experiments" / "data" / "stories.txt"


def main(paths: list[str], corpus: Path = CORPUS) -> None:
    with open(corpus) as handle:
        known = {part.strip(" .") for line in handle for part in line.strip().split(" . ") if part.strip(" .")}
    for path in paths:
        with open(path) as handle:
            texts = [json.loads(line)["text"] for line in handle]
        sentences = [part.strip(" .") for text in texts for part in text.split(" . ") if part.strip(" .")]
        found = sum(sentence in known for sentence in sentences)
        print(f"{path}: distinct {len(set(texts))}/{len(texts)}, "
              f"{sum(len(t.split()) for t in texts) / len(texts):.1f} words, "
              f"corpus sentences {found}/{len(sentences)} = {found / max(len(sentences), 1):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", nargs="+", help="predictions.jsonl files of free-text generations")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus the sentences are looked up in")
    arguments = parser.parse_args()
    main(arguments.predictions, arguments.corpus)
