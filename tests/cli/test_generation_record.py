"""Every generation logs its results as TensorBoard scalars and stores its resolved config; a
sweep (`generate -m`) names each folder by its settings."""

import json
import re
import shutil
from pathlib import Path

import pytest
from google.protobuf import json_format
from held_out_draw_counter import count_held_out_draws
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run.generation_record import settings_name
from xdllm.run.sweep import sweep_combinations, sweep_configs


def _scalars(tensorboard_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(tensorboard_dir))
    events.Reload()
    return {tag: [(s.step, s.value) for s in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _summary(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_generation_after_training_logs_scalars_and_its_config(trained_run):
    (folder,) = [path.parent for path in trained_run.glob("generate/*/predictions.jsonl")]
    config = OmegaConf.load(folder / "generate.yaml")
    assert config.split == "test" and config.predictor_overrides == {}
    assert config.predictor._target_.endswith("MLMPredictor") and config.global_step > 0
    scalars = _scalars(folder / "tensorboard")
    for name in ("exact_match", "token_accuracy", "tokens_per_second", "mean_steps", "num_samples"):
        ((step, _),) = scalars[f"generate/{name}"]
        assert step == config.global_step  # at the checkpoint's training step
    assert scalars["generate/num_samples"][0][1] == 16


@pytest.mark.slow
def test_generate_records_its_predictor_overrides(trained_run, tmp_path, capsys):
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", "predictor.max_steps=2", "num_samples=4",
                 f"output_dir={out_dir}"]) == 0
    summary = _summary(capsys)
    config = OmegaConf.load(out_dir / "generate.yaml")
    assert config.predictor_overrides == {"max_steps": 2}
    assert config.predictor.max_steps == 2 and config.num_samples == 4
    scalars = _scalars(out_dir / "tensorboard")
    assert scalars["generate/mean_steps"] == [(config.global_step, 2.0)]
    assert scalars["generate/exact_match"][0][1] == pytest.approx(summary["exact_match"])
    # the same accuracy again at step = forward passes per sample, for overlaying a sweep
    assert scalars["generate_by_forward_passes/token_accuracy"] == [
        (2, pytest.approx(summary["token_accuracy"]))]


@pytest.mark.slow
def test_sweep_names_each_folder_by_its_settings(trained_run, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    assert main(["generate", "-m", f"ckpt={trained_run}", "predictor.max_steps=2,5", "num_samples=4",
                 f"output_dir={sweep_dir}"]) == 0
    result = _summary(capsys)
    assert [run["folder"] for run in result["runs"]] == ["max_steps=2", "max_steps=5"]
    assert [run["settings"] for run in result["runs"]] == [{"predictor.max_steps": 2},
                                                          {"predictor.max_steps": 5}]
    for steps in (2, 5):
        folder = sweep_dir / f"max_steps={steps}"
        assert OmegaConf.load(folder / "generate.yaml").predictor.max_steps == steps
        assert _scalars(folder / "tensorboard")["generate/mean_steps"][0][1] == steps
    lines = (sweep_dir / "sweep.jsonl").read_text().splitlines()
    assert [json.loads(line)["mean_steps"] for line in lines] == [2, 5]


def test_a_sweep_that_fails_part_way_keeps_the_summary_of_what_finished(trained_run, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    # max_steps=2 is refused for 3 blocks of 2, inside predict(): the second generation fails
    assert main(["generate", "-m", f"ckpt={trained_run}", "predictor.block_size=2",
                 "predictor.max_steps=5,2", "num_samples=4", f"output_dir={sweep_dir}"]) == 2
    assert "max_steps=2 is smaller" in capsys.readouterr().err
    assert sorted(path.name for path in sweep_dir.iterdir()) == ["generate.log", "max_steps=5", "sweep.jsonl",
                                                                 "sweep.yaml"]
    assert "error: MLMPredictor: max_steps=2 is smaller" in (sweep_dir / "generate.log").read_text().splitlines()[-1]
    (line,) = (sweep_dir / "sweep.jsonl").read_text().splitlines()
    assert json.loads(line)["folder"] == "max_steps=5"
    assert (sweep_dir / "max_steps=5" / "predictions.jsonl").exists()


def test_a_sweep_whose_first_generation_fails_leaves_no_folder(trained_run, capsys):
    before = set((trained_run / "generate").iterdir())
    assert main(["generate", "-m", f"ckpt={trained_run}", "predictor.block_size=2",
                 "predictor.max_steps=2,1", "num_samples=4"]) == 2
    assert set((trained_run / "generate").iterdir()) == before


def _hparams(tensorboard_dir: Path) -> dict:
    """The settings of the HParams session a generation wrote."""
    events = EventAccumulator(str(tensorboard_dir))
    events.Reload()
    for content in events.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            return {key: json_format.MessageToDict(value) for key, value in data.session_start_info.hparams.items()}
    raise AssertionError(f"no HParams session in {tensorboard_dir}")


def test_a_sweep_over_options_outside_the_predictor_records_them_as_hparams(trained_run, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    assert main(["generate", "-m", f"ckpt={trained_run}", "batch_size=2,4", "num_samples=4",
                 f"output_dir={sweep_dir}"]) == 0
    captured = capsys.readouterr()
    runs = json.loads(captured.out[captured.out.index("{"):])["runs"]
    assert [run["folder"] for run in runs] == ["batch_size=2", "batch_size=4"]
    # the figures side by side on stderr, scores first: only the JSON on stdout had them
    table = captured.err[captured.err.index("the sweep's generations:\n"):].splitlines()[1:3]
    for line, run in zip(table, runs, strict=True):
        figures, _, speed = line.rpartition(", tokens_per_second=")
        assert figures == (f"  {run['folder']}: exact_match={run['exact_match']:.4g}, "
                           f"token_accuracy={run['token_accuracy']:.4g}, mean_steps={run['mean_steps']:.4g}")
        assert float(speed) == pytest.approx(run["tokens_per_second"], rel=1e-3, abs=0.5)  # 11042, not 1.104e+04
        assert "e+" not in speed
    for size in (2, 4):
        assert _hparams(sweep_dir / f"batch_size={size}" / "tensorboard")["batch_size"] == size


def test_sweep_combinations_are_the_cartesian_product():
    fixed, combinations = sweep_combinations(["ckpt=r", "predictor.threshold=0.5,0.9", "batch_size=range(1,3)"])
    assert fixed == ["ckpt=r"]
    assert combinations == [{"predictor.threshold": "0.5", "batch_size": "1"},
                            {"predictor.threshold": "0.5", "batch_size": "2"},
                            {"predictor.threshold": "0.9", "batch_size": "1"},
                            {"predictor.threshold": "0.9", "batch_size": "2"}]


@pytest.mark.parametrize("overrides, message", [
    (["ckpt=r", "predictor.threshold=0.5"], "needs at least one swept option"),
    (["ckpt=a,b", "predictor.threshold=0.5,0.9"], "ckpt cannot be swept"),
    (["ckpt=r", "ema=true,false"], "ema cannot be swept"),
    (["ckpt=r", "a=b=c,"], r"override 'a=b=c,' cannot be read \(mismatched input '='"),
    # the second generation was refused at the first's folder, after the first had run
    (["ckpt=r", "predictor.threshold=0.5,0.5"], r"two combinations are threshold=0.5 \(a value given twice"),
    (["ckpt=r", "predictor.threshold=0.5,.5", "seed=1,2"], "two combinations are threshold=0.5,seed=1"),
    (["ckpt=r", "seed=range(0,0)"], r"-m: seed=range\(0,0\) gives no value, so the sweep would run nothing"),
    (["ckpt=r", "seed=range(0,3,0)"], r"-m: seed=range\(0,3,0\) cannot be swept: range\(\) arg 3 must not be zero"),
    (["ckpt=r", "predictor.threshold=interval(0,1)"], r"cannot be swept: Can only enumerate CHOICE and RANGE"),
    (["ckpt=r", "seed=glob(*)"], r"-m: seed=glob\(\*\) cannot be swept: glob\(\) is not supported \(give"),
])
def test_bad_sweeps_are_refused(overrides, message):
    with pytest.raises(XdllmError, match=message):
        sweep_configs(overrides)


def test_settings_name():
    name = settings_name({"threshold": 0.9, "confidence": "entropy", "top_k": None, "stop_at_eos": True})
    assert name == "threshold=0.9,confidence=entropy,top_k=null,stop_at_eos=true"


def test_a_long_settings_name_is_cut_to_fit_a_folder_name_and_stays_distinct():
    """A sweep over long paths named folders past the 255 bytes a file system allows ('File name
    too long'), after planning every run."""
    first, second, accented = (settings_name({"task.params.path": f"/data/{'d' * 300}/{end}"})
                               for end in ("a.txt", "b.txt", "é" * 100))
    assert len(first.encode()) == len(second.encode()) == 180 >= len(accented.encode())
    assert first != second and first[:-10] == second[:-10]  # they differ in the digest of the whole
    assert first.startswith("task.params.path=_data_ddd") and first[-13:-10] == "..."
    assert settings_name({"task.params.path": f"/data/{'d' * 300}/a.txt"}) == first


@pytest.mark.slow
def test_a_generation_folder_is_named_by_its_predictor_settings(trained_run, tmp_path, capsys):
    run_dir = tmp_path / "run"  # a copy: the shared run keeps its one generation folder
    shutil.copytree(trained_run / "checkpoints", run_dir / "checkpoints")
    shutil.copy(trained_run / "config.yaml", run_dir)
    assert main(["generate", f"ckpt={run_dir}", "predictor.max_steps=3", "num_samples=2"]) == 0
    assert main(["generate", f"ckpt={run_dir}", "num_samples=2"]) == 0
    first, second = sorted(path.name for path in (run_dir / "generate").iterdir())
    assert all(re.fullmatch(r"\d{8}-\d{6}(_max_steps=3)?", name) for name in (first, second))
    assert {first.partition("_")[2], second.partition("_")[2]} == {"max_steps=3", ""}


def test_several_values_without_multirun_say_how_to_sweep(capsys):
    assert main(["generate", "ckpt=r", "predictor.threshold=0.5,0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "predictor.threshold=0.5,0.9 gives several values: add -m" in err[0]


def test_cfg_of_a_sweep_prints_each_combination(capsys):
    assert main(["generate", "-m", "--cfg", "ckpt=r", "predictor.threshold=0.5,0.9"]) == 0
    documents = capsys.readouterr().out.split("---\n")
    assert [OmegaConf.create(d).predictor.threshold for d in documents] == [0.5, 0.9]


def test_a_sweep_over_num_samples_checks_each_against_the_runs_held_out_count(trained_run, tmp_path, capsys):
    # the loaded run is shared: a count taken before must not lower the limit (16) for the next
    assert main(["generate", "-m", f"ckpt={trained_run}", "num_samples=2,16", f"output_dir={tmp_path / 'sweep'}"]) == 0
    assert [run["num_samples"] for run in _summary(capsys)["runs"]] == [2, 16]


def test_a_sweep_draws_each_combinations_held_out_samples_once(trained_run, tmp_path, capsys, monkeypatch):
    drawn = count_held_out_draws(monkeypatch)
    assert main(["generate", "-m", f"ckpt={trained_run}", "num_samples=2,4,3",
                 f"output_dir={tmp_path / 'sweep'}"]) == 0
    assert [run["num_samples"] for run in _summary(capsys)["runs"]] == [2, 4, 3]
    assert drawn == [("test", 2), ("test", 4), ("test", 3)]
