"""A family's name is what ``model=<name>`` selects: discovery refuses a name without its config."""

import uuid
from pathlib import Path

import pytest
from model_package_factory import write_model_package

from xdllm.registry import ModelRegistryError, discover_families


def test_family_named_unlike_its_model_config_is_refused(tmp_path: Path):
    package = f"xdllm_test_misnamed_{uuid.uuid4().hex[:8]}"
    root = write_model_package(tmp_path / "models", package, "wmlmx")
    configs = root / package / "configs" / "model"
    (configs / "wmlmx.yaml").rename(configs / "wmlm.yaml")
    with pytest.raises(ModelRegistryError) as error:
        discover_families([root])
    message = str(error.value)
    assert "\n" not in message
    assert str(configs / "wmlmx.yaml") in message and "found there: wmlm.yaml" in message
