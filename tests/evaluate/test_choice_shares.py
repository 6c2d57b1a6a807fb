"""Multiple-choice scores at validation split among the training processes: each scores a run of
batches, the scores are gathered, and every process logs what one process alone would."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY_MLM, TINY_RUN

from xdllm.cli.main import main
from xdllm.run import choice_scores
from xdllm.run.checkpoint import load_trained
from xdllm.run.choice_scores import ChoiceProbe
from xdllm.train.processes import Processes

PROMPTS = ("4 3 2 1", "2 1 4 3", "3 3 1 2", "9 8 7 6")
QUESTIONS = [{"prompt": p, "choices": [p, " ".join(sorted(p.split())), "0 0 0 0"], "answer": 1} for p in PROMPTS]
TRAIN = ["train", "experiment=sort_mdlm", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=2",
         "trainer.val_check_interval=2"]


def _questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(question) + "\n" for question in QUESTIONS))
    return path


@pytest.mark.parametrize("count, batches_run", [
    (2, [[0, 3], [6, 9]]),
    (3, [[0, 3], [6, 9], [0, 0]]),  # the third has no batch of its own: it runs the first one twice, unkept
])
def test_each_process_scores_its_run_of_batches_and_all_log_one_process_s_figures(
        tmp_path, monkeypatch, count, batches_run):
    assert main([*TRAIN, f"run_dir={tmp_path / 'run'}"]) == 0
    run = load_trained(tmp_path / "run")
    probe = ChoiceProbe(str(_questions(tmp_path)), run.components, batch_size=3)  # 12 choices: 4 batches
    with torch.inference_mode():
        alone = probe(run.model)
    collated = choice_scores.collated_choices
    starts = []
    monkeypatch.setattr(choice_scores, "collated_choices",
                        lambda collate, choices, start, size: starts.append(start) or collated(
                            collate, choices, start, size))
    local = {}

    def keep(rank):
        def gather(tensor):
            local[rank] = tensor
            return torch.stack([local.get(other, torch.full_like(tensor, float("nan"))) for other in range(count)])
        return gather

    with torch.inference_mode():  # as validation runs
        for rank in range(count):  # each process's share, as the processes would compute them
            starts.clear()
            probe(run.model, Processes(rank, count, keep(rank)))
            assert starts == batches_run[rank]
        for rank in range(count):  # then every process with everyone's share
            everyone = Processes(rank, count, lambda tensor: torch.stack([local[r] for r in range(count)]))
            assert probe(run.model, everyone) == pytest.approx(alone, rel=1e-12)
    assert alone["choice_accuracy"] in (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_two_ddp_processes_log_the_choice_scores_eval_gives(tmp_path, capsys):
    path, run_dir = _questions(tmp_path), tmp_path / "ddp"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    done = subprocess.run([sys.executable, "-m", "xdllm.cli.main", *TRAIN, "trainer_strategy=ddp",
                           f"validation_choices={path}", "data.eval_batch_size=3", f"run_dir={run_dir}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    logged = {tag: events.Scalars(f"val/{tag}")[-1].value for tag in ("answer_nll", "choice_accuracy")}
    capsys.readouterr()
    assert main(["eval", f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}", f"prompts_file={path}",
                 "batch_size=3"]) == 0
    out = capsys.readouterr().out
    scores = json.loads(out[out.index("{"):])
    assert logged["answer_nll"] == pytest.approx(scores["answer_nll"], rel=1e-5)
    assert logged["choice_accuracy"] == pytest.approx(scores["choice_accuracy"])
