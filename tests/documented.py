"""The pages a reader copies commands, paths and names from: the README, docs/, experiments/
and the family packages' pages (tests/reliability/test_documented_*.py check them against the
code)."""

from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "experiments").rglob("*.md")), *sorted((ROOT / "models").rglob("*.md"))]
