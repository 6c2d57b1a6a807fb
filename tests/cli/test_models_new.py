"""``xdllm models new NAME``: a new family package that starts as a copy of another, trains and
generates as itself, and is refused in one line where it cannot be made."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import yaml
from model_package_factory import write_model_package
from omegaconf import OmegaConf, open_dict
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.config.compose import compose_config
from xdllm.errors import XdllmError
from xdllm.family_fork import fork_family
from xdllm.registry import discover_families
from xdllm.run.build import build_components

BUILT_IN = sorted(name for name, found in discover_families().items() if found.module.startswith("xdllm_models."))


def unique(prefix: str) -> str:
    """A package name no other test (or xdist worker) imports: a module stays in sys.modules."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_a_copy_of_mlm_trains_and_generates_as_its_own_family(tmp_path: Path, capsys):
    name = unique("nf_mlm")
    assert main(["models", "new", name, "--dir", str(tmp_path / "families")]) == 0
    said = capsys.readouterr().out
    package = tmp_path / "families" / name
    assert f"wrote {package}/: family {name}, a copy of the mlm family (xdllm_models.mlm)" in said
    assert f"export XDLLM_MODEL_PATH={package.parent.resolve()}" in said
    assert f"xdllm train experiment=sort_mlm model={name} run_dir=runs/{name}" in said
    assert f"python -m pytest tests/families -k {name}" in said
    assert (package / "configs" / "model" / f"{name}.yaml").is_file()
    assert (package / "configs" / "collator" / f"packed_{name}.yaml").is_file()

    run_dir = tmp_path / "run"
    assert main(["train", *TINY, f"model={name}", f"model_search_path=[{package.parent}]", "trainer.max_steps=2",
                 "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
    config = OmegaConf.load(run_dir / "config.yaml")
    assert config.model_family == name
    assert config.model._target_ == f"{name}.model.RotaryTransformerMLMModel"
    assert config.loss._target_ == f"{name}.loss.MLMLoss"
    assert config[name].target_length is None and "mlm" not in config  # its own config section
    assert "val/exact_match=" in (run_dir / "train.log").read_text()  # the copy's predictor generated


@pytest.mark.parametrize("source", BUILT_IN)
def test_every_built_in_family_copies_into_a_package_that_builds(source: str, tmp_path: Path):
    name = unique("nf_copy")  # not containing the source's name, whose absence is checked
    fork = fork_family(source, name, tmp_path)
    assert fork.package_dir == tmp_path / name and fork.source == source
    for relative in fork.files:
        assert not re.search(rf"(?<![A-Za-z0-9]){source}(?![A-Za-z0-9])", Path(relative).name), relative
        text = (fork.package_dir / relative).read_text(encoding="utf-8")
        assert f"xdllm_models.{source}." not in text and f"from xdllm_models.{source} " not in text, relative
    model_config = yaml.safe_load((fork.package_dir / "configs" / "model" / f"{name}.yaml").read_text())
    assert model_config["model_family"] == name
    original = yaml.safe_load((Path(discover_families()[source].family.config_dir) / "model" / f"{source}.yaml")
                              .read_text())
    assert (name in model_config) == (source in original) and source not in model_config  # the family's section

    config = compose_config("train", [f"model={name}", f"model_search_path=[{tmp_path}]", "task=sort",
                                      "model.d_model=32", "model.n_layers=1", "model.n_heads=2"])
    if not fork.frozen_models:  # a drafter's model reads its frozen target's checkpoint as it is built
        components = build_components(config)
        assert type(components.model).__module__.startswith(f"{name}.") or config.model._target_.startswith("xdllm.")
        assert type(components.loss).__module__.startswith(f"{name}.")
        assert type(components.predictor).__module__.startswith(f"{name}.")
    else:
        assert fork.frozen_models == dict(discover_families()[source].family.frozen_models)
        with open_dict(config):
            config.derived = {key: 1 for key in ("vocab_size", "pad_token_id", "mask_token_id", "bos_token_id",
                                                 "eos_token_id", "max_new_tokens", "max_prompt_len")}
    OmegaConf.resolve(config)  # every interpolation of the copy's configs has its key


def test_a_copy_of_a_copy_says_where_it_came_from_once(tmp_path: Path):
    first, second = unique("nf_first"), unique("nf_second")
    fork_family("mlm", first, tmp_path / "a")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDLLM_MODEL_PATH", str(tmp_path / "a"))
        fork = fork_family(first, second, tmp_path / "b")
    init = (fork.package_dir / "__init__.py").read_text()
    assert init.startswith(f"# The {second} family: started as a copy of the {first} family ({first}),\n")
    assert init.count("made by `xdllm models new`") == 1 and f'name="{second}"' in init
    assert f"from {second}.types import" in (fork.package_dir / "loss.py").read_text()


@pytest.mark.parametrize(("name", "said"), [
    ("My_fam", "must be a lower-case Python identifier"),
    ("2fam", "must be a lower-case Python identifier"),
    ("my-fam", "must be a lower-case Python identifier"),
    ("class", "must be a lower-case Python identifier"),
    ("mdlm", "is taken, by entry point 'mdlm = xdllm_models.mdlm:FAMILY'"),
    ("json", "is taken by an importable module"),
])
def test_a_name_that_cannot_be_a_family_is_refused_before_anything_is_written(name: str, said: str, tmp_path: Path):
    with pytest.raises(XdllmError, match=re.escape(said)):
        fork_family("mlm", name, tmp_path / "families")
    assert not (tmp_path / "families").exists()


def test_an_unknown_source_family_is_refused_with_the_families_named(tmp_path: Path):
    with pytest.raises(XdllmError, match=r"no model family 'nope' to start from; the families: arlm, bd3lm"):
        fork_family("nope", unique("nf"), tmp_path)


def test_an_existing_package_folder_is_never_overwritten(tmp_path: Path, capsys):
    name = unique("nf_exists")
    (tmp_path / name).mkdir()
    (tmp_path / name / "model.py").write_text("# mine\n")
    assert main(["models", "new", name, "--dir", str(tmp_path)]) == 2
    assert f"{tmp_path / name} exists: nothing is overwritten" in capsys.readouterr().err
    assert (tmp_path / name / "model.py").read_text() == "# mine\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == [name]  # no temporary copy left


def test_a_dir_that_is_a_file_is_refused(tmp_path: Path):
    (tmp_path / "families").write_text("")
    with pytest.raises(XdllmError, match="is not a folder: give the folder to write the package"):
        fork_family("mlm", unique("nf"), tmp_path / "families")


def test_a_copy_that_does_not_load_leaves_nothing_behind(tmp_path: Path):
    source_package = unique("nf_broken_src")
    write_model_package(tmp_path / "src", source_package, source_package)
    config = tmp_path / "src" / source_package / "configs" / "model" / f"{source_package}.yaml"
    config.write_text(config.read_text().replace(".model.ToyBagModel", ".model.NoSuchModel"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDLLM_MODEL_PATH", str(tmp_path / "src"))
        with pytest.raises(XdllmError, match=r"does not load \(.*NoSuchModel.*\); nothing was written"):
            fork_family(source_package, unique("nf_broken"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_models_without_an_action_still_lists_the_families(capsys):
    assert main(["models"]) == 0
    listed = capsys.readouterr().out
    assert all(re.search(rf"^{name}\s", listed, re.MULTILINE) for name in BUILT_IN)


def test_the_load_check_names_what_keeps_a_package_from_loading(tmp_path: Path):
    from xdllm.family_load_check import load_problem

    good, broken_model, broken_init = (unique("nf_check") for _ in range(3))  # new modules: none cached
    for name in (good, broken_model, broken_init):
        write_model_package(tmp_path / name, name, name)
    (tmp_path / broken_model / broken_model / "model.py").write_text("def broken(:\n")
    (tmp_path / broken_init / broken_init / "__init__.py").write_text("raise RuntimeError('no')\n")
    assert load_problem(tmp_path / good, good) is None
    assert load_problem(tmp_path / good, "nf_other") == (
        f"the registry does not find family 'nf_other' in {tmp_path / good}")
    assert load_problem(tmp_path / broken_model, broken_model).startswith(
        f"{broken_model}.yaml: _target_ {broken_model}.model.ToyBagModel does not load: SyntaxError: ")
    assert "failed to import: no" in load_problem(tmp_path / broken_init, broken_init)


def test_a_copy_not_yet_on_the_search_path_is_named_where_it_is(tmp_path: Path, monkeypatch, capsys):
    name = unique("nf_unfound")
    fork_family("mlm", name, tmp_path / "families")
    monkeypatch.chdir(tmp_path)
    assert main(["train", f"model={name}", "--cfg"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        f"; families/{name} holds a family package, which xdllm finds once its folder is on the search path: "
        f"export XDLLM_MODEL_PATH={tmp_path}/families (or model_search_path=[{tmp_path}/families] on the command)")
    monkeypatch.setenv("XDLLM_MODEL_PATH", str(tmp_path / "other"))
    (tmp_path / "other").mkdir()
    assert main(["train", f"model={name}", "--cfg"]) == 2  # the export keeps the folders the variable names
    assert f"export XDLLM_MODEL_PATH={tmp_path}/families:{tmp_path}/other (or" in capsys.readouterr().err
    assert main(["train", "model=nf_none", "--cfg"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("available: arlm, bd3lm, dflash, hybrid, mdlm, mlm, udlm")
