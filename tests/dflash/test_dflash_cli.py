"""End to end from the CLI: a drafter trained on a target run, `xdllm generate` decoding
speculatively and with the target alone (the same tokens), and the benchmark's JSON line."""

import json
import sys
from pathlib import Path

import pytest
from dflash_helpers import DRAFTER
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xdllm.cli.main import main

sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
import bench_drafter_cache  # noqa: E402
import bench_speculative  # noqa: E402


@pytest.fixture(scope="module")
def drafter_run(target_run, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("dflash-drafter") / "run"
    assert main(["train", *DRAFTER, f"+frozen.target={target_run}", f"run_dir={run_dir}"]) == 0
    return run_dir


def generated(run_dir: Path, output: Path, *overrides: str) -> list[dict]:
    assert main(["generate", f"ckpt={run_dir}", "num_samples=8", f"output_dir={output}", *overrides]) == 0
    return [json.loads(line) for line in (output / "predictions.jsonl").read_text().splitlines()]


def test_generate_decodes_speculatively_with_the_targets_tokens(drafter_run, target_run, tmp_path, capsys):
    speculative = generated(drafter_run, tmp_path / "speculative")
    summary = json.loads(capsys.readouterr().out)
    alone = generated(drafter_run, tmp_path / "alone", "predictor.speculative=false")
    target = generated(target_run, tmp_path / "target")
    assert [r["ids"] for r in speculative] == [r["ids"] for r in alone] == [r["ids"] for r in target]
    assert all(r["target_passes"] == r["draft_passes"] + 1 for r in speculative)
    assert summary["acceptance_length"] >= 1.0 and summary["target_passes_per_token"] <= 1.0


def test_training_logs_the_draft_accuracy_per_block_position(drafter_run):
    lines = (drafter_run / "config.yaml").read_text()
    assert "model_family: dflash" in lines
    events = list((drafter_run / "tensorboard").glob("events.*"))
    tags = EventAccumulator(str(events[0])).Reload().Tags()
    assert {f"val/draft_acc_pos_{k}" for k in (1, 2, 3)} <= set(tags["scalars"])
    assert "val/draft_acc_by_position" in tags["images"]  # the curve over block positions


def test_the_benchmark_prints_acceptance_and_speedup(drafter_run, capsys):
    result = bench_speculative.main(["--drafter", str(drafter_run), "--num-samples", "4", "--repeats", "1"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert result["identical"] and result["num_samples"] == 4 and result["block_size"] == 4
    assert result["acceptance_length"] >= 1.0 and 0 < result["target_passes_per_token"] <= 1.0
    assert result["speedup"] > 0


def test_the_speculative_benchmark_refuses_a_run_that_is_not_a_drafter_and_bad_counts(target_run, drafter_run,
                                                                                     capsys):
    with pytest.raises(SystemExit):
        bench_speculative.main(["--drafter", str(target_run)])
    assert "is a run of the arlm family, not a dflash drafter" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_speculative.main(["--drafter", str(drafter_run), "--num-samples", "0"])
    assert "--num-samples must be >= 1, got 0" in capsys.readouterr().err


def test_generate_samples_with_the_predictor_options(drafter_run, tmp_path):
    greedy = generated(drafter_run, tmp_path / "greedy")
    sampled = generated(drafter_run, tmp_path / "sampled", "predictor.temperature=1.0", "predictor.top_k=20")
    again = generated(drafter_run, tmp_path / "again", "predictor.temperature=1.0", "predictor.top_k=20")
    assert [r["ids"] for r in sampled] == [r["ids"] for r in again]  # seeded
    assert [r["ids"] for r in sampled] != [r["ids"] for r in greedy]


def test_the_benchmark_samples_with_a_temperature(drafter_run, capsys):
    result = bench_speculative.main(["--drafter", str(drafter_run), "--num-samples", "4", "--repeats", "1",
                                     "--temperature", "1", "--top-p", "0.9", "--compare-drafter-cache"])
    assert result["temperature"] == 1.0 and result["top_p"] == 0.9 and result["identical"] is None
    assert result["identical_with_drafter_cache"] and result["ms_per_round_uncached"] > 0
    assert result["acceptance_length"] >= 1.0 and result["speedup"] > 0
    with pytest.raises(SystemExit):
        bench_speculative.main(["--drafter", str(drafter_run), "--temperature", "-1"])
    assert "SpeculativePredictor: temperature must be >= 0" in capsys.readouterr().err


def test_the_drafter_cache_benchmark_times_both_modes_by_context_length(drafter_run, target_run, capsys):
    results = bench_drafter_cache.main(["--drafter", str(drafter_run), "--contexts", "16", "100",
                                        "--iterations", "2", "--repeats", "1"])
    assert [r["context"] for r in results] == [16, 100]  # 100: beyond the drafter's positions
    assert all(r["ms_cached"] > 0 and r["ms_uncached"] > 0 and r["ms_cached_masked"] > 0 for r in results)
    assert [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()[-2:]] == results
    with pytest.raises(SystemExit):
        bench_drafter_cache.main(["--drafter", str(drafter_run), "--contexts", "4"])
    assert "every --contexts length must exceed --new-slots=4, got [4]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_drafter_cache.main(["--drafter", str(target_run)])
    assert "is not a dflash drafter run" in capsys.readouterr().err


def test_the_drafter_cache_benchmark_compares_saved_runs_by_their_medians(tmp_path, capsys):
    def saved(name, times, masked=None):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"context": length, "ms_cached": ms, **({"ms_cached_masked": 2 * ms}
                                                                                    if masked else {})}) + "\n"
                                for length, ms in times))
        return str(path)

    before = [saved("old1", [(32, 2.0), (4096, 9.0)]), saved("old2", [(32, 4.0), (4096, 6.0)]),
              saved("old3", [(32, 3.0), (4096, 3.0)])]
    after = [saved("new1", [(4096, 2.0), (32, 1.0)], masked=True), saved("new2", [(4096, 4.0), (32, 1.0)], masked=True)]
    results = bench_drafter_cache.main(["--before", *before, "--after", *after])
    assert results == [{"context": 32, "ms_cached_before": 3.0, "ms_cached_after": 1.0, "ratio": 3.0, "runs": [3, 2],
                        "ms_cached_masked_after": 2.0, "ratio_masked": 1.5},
                       {"context": 4096, "ms_cached_before": 6.0, "ms_cached_after": 3.0, "ratio": 2.0,
                        "runs": [3, 2], "ms_cached_masked_after": 6.0, "ratio_masked": 1.0}]
    assert [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()] == results
    with pytest.raises(SystemExit):
        bench_drafter_cache.main(["--before", *before])
    assert "--before and --after go together" in capsys.readouterr().err
