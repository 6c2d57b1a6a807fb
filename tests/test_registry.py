from pathlib import Path

import pytest
from model_package_factory import write_model_package

from xdllm.registry import SEARCH_PATH_ENV, ModelRegistryError, discover_families


def test_builtin_mlm_is_found_through_its_entry_point():
    families = discover_families()
    assert "mlm" in families
    assert "entry point" in families["mlm"].source
    assert (families["mlm"].family.config_dir / "model" / "mlm.yaml").is_file()


def test_search_path_package_is_discovered(external_models: Path):
    families = discover_families([external_models])
    assert families["toyfam"].family.description == "throwaway test family"
    assert str(external_models) in families["toyfam"].source


def test_environment_search_path_is_used(external_models: Path, monkeypatch):
    monkeypatch.setenv(SEARCH_PATH_ENV, str(external_models))
    assert "toyfam" in discover_families()


def test_two_packages_claiming_one_name_is_an_error(tmp_path: Path):
    root = write_model_package(tmp_path / "clash", "xdllm_test_clash_mlm", "mlm")
    with pytest.raises(ModelRegistryError, match="claimed twice") as error:
        discover_families([root])
    assert "entry point" in str(error.value) and "xdllm_test_clash_mlm" in str(error.value)


def test_package_without_family_is_an_error(tmp_path: Path):
    package = tmp_path / "models" / "xdllm_test_nofamily"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    with pytest.raises(ModelRegistryError, match="defines no FAMILY"):
        discover_families([tmp_path / "models"])


def test_package_that_fails_to_import_names_itself(tmp_path: Path):
    package = tmp_path / "models" / "xdllm_test_broken"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ModelRegistryError, match="xdllm_test_broken.*boom"):
        discover_families([tmp_path / "models"])


def test_missing_search_path_folder_is_an_error(tmp_path: Path):
    with pytest.raises(ModelRegistryError, match="not a directory"):
        discover_families([tmp_path / "does-not-exist"])


def test_the_search_path_export_keeps_the_folders_the_variable_names(tmp_path: Path, monkeypatch):
    from xdllm.registry import on_search_path, search_path_export

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv(SEARCH_PATH_ENV, str(tmp_path / "a"))
    assert on_search_path(tmp_path / "a") and not on_search_path(tmp_path / "b")
    assert search_path_export(tmp_path / "b") == f"export {SEARCH_PATH_ENV}={tmp_path / 'b'}:{tmp_path / 'a'}"
    monkeypatch.delenv(SEARCH_PATH_ENV)
    assert search_path_export(tmp_path / "b") == f"export {SEARCH_PATH_ENV}={tmp_path / 'b'}"
