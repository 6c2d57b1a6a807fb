"""A UTF-8 byte-order mark, as Windows editors write, is not part of a prompts or choices file's
first line (it made the first prompt an unknown symbol, and a JSONL first line invalid JSON)."""

import codecs
import json

from xdllm.run.choice_file import is_choice_file
from xdllm.run.prompt_sources import text_file_lines


def test_the_first_line_of_a_marked_file_is_read_without_the_mark(tmp_path):
    marked = tmp_path / "prompts.txt"
    content = codecs.BOM_UTF8 + "7 6 5\r\n1 2 3\r\n".encode("utf-8")
    marked.write_bytes(content)
    lines, sha256 = text_file_lines(marked, "prompts_file")
    assert lines == ["7 6 5", "1 2 3"]
    plain = tmp_path / "plain.txt"
    plain.write_bytes(content[len(codecs.BOM_UTF8):])
    assert text_file_lines(plain, "prompts_file")[1] != sha256  # the digest is of the file's own bytes


def test_a_marked_multiple_choice_file_is_recognised(tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_bytes(codecs.BOM_UTF8 + json.dumps({"prompt": "1 2", "choices": ["1 2", "2 1"]}).encode())
    assert is_choice_file(questions)
    lines, _ = text_file_lines(questions, "multiple-choice file")
    assert json.loads(lines[0])["choices"] == ["1 2", "2 1"]
