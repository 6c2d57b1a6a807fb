"""Prompt/response data: prompts never corrupted, loss on the response and its EOS fill, for the
MLM seq2seq collators and MDLM's response window; generation scores the test split's responses."""

import json
import random
from pathlib import Path

import pytest
import torch
from tiny_run import TINY_RUN

from xdllm.cli.main import main
from xdllm.data.prepared_store import PreparedData
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.mdlm.collator import MDLMCollator
from xdllm_models.mlm.collator import MLMSeq2SeqCollator, MLMSeq2SeqTrainCollator

TOKENIZER = builtin_tokenizer()
TINY_PAIRS = [*(o for o in TINY_RUN if not o.startswith(("experiment=", "data.num_", "task."))), "task=prepared",
              "data.num_val_samples=4", "data.num_test_samples=4", "model.d_model=32", "model.n_layers=1",
              "model.n_heads=2", "trainer.max_steps=2", "trainer.val_check_interval=2"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """40 pairs "reverse these letters": 32 train, 4 validation, 4 test, prepared from JSONL."""
    folder = tmp_path_factory.mktemp("pairs")
    rng = random.Random(0)
    lines = []
    for _ in range(40):
        letters = [rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))]
        lines.append(json.dumps({"prompt": " ".join(letters), "response": " ".join(reversed(letters))}))
    source = folder / "pairs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    assert main(["data", "prepare", str(source), "-o", str(folder / "prepared"), "--tokenizer", "builtin",
                 "--format", "prompt_response", "--val-fraction", "0.1", "--test-fraction", "0.1"]) == 0
    return folder / "prepared"


def _examples(pairs: Path, count: int = 8):
    task = PreparedTask(pairs, TOKENIZER)
    return [task.example("train", position, seed=0, step=3) for position in range(count)]


@pytest.mark.parametrize("collator_type", [MLMSeq2SeqTrainCollator, MLMSeq2SeqCollator])
def test_mlm_seq2seq_collators_corrupt_only_the_response(pairs, collator_type):
    examples = _examples(pairs)
    batch = collator_type(TOKENIZER, seed=0, eps=0.999)(examples)
    mask = TOKENIZER.mask_token_id
    for row, sample in enumerate(examples):
        prompt, response = sample["prompt_ids"], [*sample["target_ids"], TOKENIZER.eos_token_id]
        real = batch["target_ids"][row][batch["attention_mask"][row]].tolist()
        noisy = batch["input_ids"][row][batch["attention_mask"][row]].tolist()
        assert real == [TOKENIZER.bos_token_id, *prompt, *response]
        assert noisy[:1 + len(prompt)] == real[:1 + len(prompt)]  # bos and prompt intact
        assert noisy[1 + len(prompt):] == [mask] * len(response)  # eps ~ 1: the whole response masked


def test_mdlm_response_window_supervises_the_response_and_its_eos_fill(pairs):
    examples = _examples(pairs)
    length = PreparedTask(pairs, TOKENIZER).max_target_len + 1
    batch = MDLMCollator(TOKENIZER, seed=0, eps=0.999, target_length=length)(examples)
    eos = TOKENIZER.eos_token_id
    for row, sample in enumerate(examples):
        start = 1 + len(sample["prompt_ids"])
        supervised = batch["loss_mask"][row].bool()
        assert supervised.nonzero().flatten().tolist() == list(range(start, start + length))
        fill = [eos] * (length - len(sample["target_ids"]))
        assert batch["target_ids"][row, start:start + length].tolist() == [*sample["target_ids"], *fill]
        assert batch["input_ids"][row, :start].tolist() == [TOKENIZER.bos_token_id, *sample["prompt_ids"]]
        assert not batch["noise_mask"][row, :start].any()
        assert torch.equal(batch["noise_mask"][row], supervised)  # eps ~ 1: all of it masked


@pytest.mark.parametrize("family", ["mdlm", "mlm"])
def test_train_then_generate_scores_the_test_responses(pairs, tmp_path, capsys, family):
    run_dir = tmp_path / "run"
    fill = [f"{family}.target_length=${{derived.max_new_tokens}}"]
    assert main(["train", *TINY_PAIRS, f"model={family}", f"task.params.path={pairs}", *fill,
                 f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    assert main(["generate", f"ckpt={run_dir}", "split=test", f"output_dir={tmp_path / 'out'}"]) == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    test = PreparedData(pairs).split("test")
    expected = [tuple(TOKENIZER.decode(ids) for ids in test.sample(i)) for i in range(len(test))]
    assert [(record["prompt"], record["target"]) for record in records] == expected
    assert summary["num_samples"] == 4 and 0.0 <= summary["exact_match"] <= 1.0
    assert summary["exact_match"] == sum(record["exact_match"] for record in records) / 4
