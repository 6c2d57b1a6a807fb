"""A YAML syntax error in a family's config is one error line naming the file, line and column."""

import uuid

import pytest
from model_package_factory import write_model_package

from xdllm.cli.main import main


@pytest.mark.parametrize(("group", "text", "where", "problem"), [
    ("experiment", "# @package _global_\ntrainer:\n  max_steps: [1, 2\n", "line 4, column 1",
     "expected ',' or ']', but got '<stream end>' (while parsing a flow sequence from line 3, column 14)"),
    ("model", "model_family: broken\n  bad: : [\n", "line 2, column 6", "mapping values are not allowed here"),
])
def test_a_yaml_syntax_error_names_the_file_and_position(group, text, where, problem, tmp_path, capsys):
    package = f"xdllm_test_yamlfam_{uuid.uuid4().hex[:8]}"
    root = write_model_package(tmp_path / "models", package, "yamlfam")
    broken = root / package / "configs" / group / "broken.yaml"
    broken.parent.mkdir(exist_ok=True)
    broken.write_text(text)
    assert main(["train", f"{group}=broken", f"model_search_path=[{root}]", "--cfg"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"xdllm: error: invalid YAML in {broken}, {where}: {problem}\n"
