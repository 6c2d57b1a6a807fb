"""A built wheel (``pip install .``, ``pip install git+...``) is a working xdllm: it carries every
package, every Hydra config and the shipped experiment data, and runs from them alone.

The wheel once lacked ``xdllm.config`` (``import xdllm`` failed) and every YAML file (no
``experiment=...`` could compose): only the editable install of ``make setup`` worked."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from tiny_run import TINY_TEXT

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "xdllm", "models", "configs", "experiments/data"]


def _expected_members() -> set[str]:
    """What the wheel must hold: each source file under the name it installs as."""
    installed_as = {"xdllm": "xdllm", "models": "xdllm_models", "configs": "xdllm/repository_files/configs",
                    "experiments/data": "xdllm/repository_files/experiments/data"}
    members = set()
    for folder, name in installed_as.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml", ".txt", ".json"):
                members.add(f"{name}/{path.relative_to(ROOT / folder).as_posix()}")
    return members


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (a build writes build/ and *.egg-info beside them)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", str(source), "-w", str(out)], check=True, capture_output=True, text=True)
    (built,) = out.glob("xdllm-*.whl")
    return built


def test_the_wheel_holds_every_package_config_and_shipped_file(wheel: Path):
    members = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected_members() - members)
    assert not missing, f"pyproject.toml [tool.setuptools] does not ship: {missing[:10]}"


def test_an_installed_wheel_trains_a_shipped_experiment_from_its_own_files(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    environment = {**os.environ, "PYTHONPATH": str(site)}  # before the editable install's finder
    environment.pop("XDLLM_MODEL_PATH", None)
    run = [sys.executable, "-c", "import sys; from xdllm.cli.main import main; sys.exit(main(sys.argv[1:]))"]
    models = subprocess.run([*run, "models"], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert models.returncode == 0, models.stderr
    assert f"configs: {site / 'xdllm_models' / 'mdlm' / 'configs'}" in models.stdout
    trained = subprocess.run([*run, "train", "experiment=text_mdlm", *TINY_TEXT, "trainer.max_steps=1",
                              "generate_after_train=false", "run_dir=runs/text"],
                             cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-3000:]
    config = yaml.safe_load((tmp_path / "runs" / "text" / "config.yaml").read_text())
    assert config["tokenizer"] == str(site / "xdllm" / "repository_files" / "experiments" / "data"
                                      / "stories_tokenizer.json")
    assert config["task"]["params"]["path"].startswith(str(site))
    assert (tmp_path / "runs" / "text" / "checkpoints" / "last.ckpt").is_file()


def test_an_installed_wheel_copies_a_family_from_its_own_files(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    environment = {**os.environ, "PYTHONPATH": str(site)}
    environment.pop("XDLLM_MODEL_PATH", None)
    run = [sys.executable, "-c", "import sys; from xdllm.cli.main import main; sys.exit(main(sys.argv[1:]))"]
    made = subprocess.run([*run, "models", "new", "wheel_mdlm", "--from", "mdlm"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    copy = tmp_path / "families" / "wheel_mdlm"
    assert (copy / "configs" / "model" / "wheel_mdlm.yaml").is_file()
    assert (copy / "configs" / "experiment" / "sort_wheel_mdlm.yaml").is_file()
    assert "from wheel_mdlm.types import" in (copy / "loss.py").read_text()
    listed = subprocess.run([*run, "models"], cwd=tmp_path, env={**environment, "XDLLM_MODEL_PATH": str(copy.parent)},
                            capture_output=True, text=True)
    assert f"source: package {copy}" in listed.stdout, listed.stderr[-3000:]
