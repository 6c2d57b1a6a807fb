"""Fixtures of the history tests; the fake engine lives in history_fakes.py."""

import pytest
from history_fakes import fake_generate


@pytest.fixture
def generate():
    return fake_generate
