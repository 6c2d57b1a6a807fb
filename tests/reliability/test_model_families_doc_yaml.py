"""Every YAML block of docs/model_families.md parses, so the examples can be copied as written."""

import re
from pathlib import Path

import pytest
import yaml

DOC = Path(__file__).parents[2] / "docs" / "model_families.md"
BLOCKS = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_doc_has_yaml_blocks():
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS)
def test_yaml_block_parses(block):
    assert isinstance(yaml.safe_load(block), dict)
