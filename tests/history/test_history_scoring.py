"""The final score of a sample agrees with the evaluator's (``correct_tokens`` in
predictions.jsonl), positions never generated included."""

from __future__ import annotations

import dataclasses

import torch
from rich.console import Console

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, format_replay, load_history
from xdllm.history.live import play
from xdllm.history.reader import SampleHistory
from xdllm.history.render import result_summary
from xdllm.history.tensorboard import overview_markdown
from xdllm.predict.metrics import match_output_regions

TOKENIZER = SymbolTokenizer(list("abcdefgh"))
MASK = TOKENIZER.mask_token_id


def test_positions_still_masked_at_the_end_are_wrong_as_the_evaluator_scores_them(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    run = generate(recorder, prompt_lens=[2], gen_len=5, commits_per_step=[1], max_steps=2, seed=3)
    sample = load_history(recorder.files_written[0]).sample(0)
    assert sample.masks_remaining.tolist() == [4, 3]  # 3 positions never generated
    evaluator = match_output_regions(run.prediction["ids"], run.output_start, run.batch["target_ids"],
                                     TOKENIZER.eos_token_id, TOKENIZER.pad_token_id)
    correct = int(evaluator.correct[0])
    assert sample.correct_tokens == correct and correct <= 2
    assert not (sample.wrong[0] & sample.masked[0]).any()  # masked while running: not wrong
    assert (sample.wrong[-1] | ~sample.masked[-1]).all()  # masked at the end: wrong

    result = f"{correct} of 5 target tokens right ({5 - correct} wrong, marked ✗; 3 of them never generated, _✗)"
    text = format_replay(sample, color=False).splitlines()
    assert f"result: {result}" in text
    first, last = (text[text.index(line) + 1] for line in text if line.startswith("step "))
    assert first.split().count("_") == 4 and "_✗" not in first
    assert last.split().count("_✗") == 3
    assert f"**result:** {result}" in overview_markdown(sample, sample.token)


def test_target_positions_past_the_output_region_are_wrong():
    """As the evaluator: a reference longer than the region the predictor wrote scores its
    remaining tokens as wrong."""
    sample = SampleHistory(
        sample_id=0, output_start=1, steps=torch.tensor([0]), topk_ids=torch.zeros(1, 2, 1, dtype=torch.long),
        topk_probs=torch.ones(1, 2, 1), canvas=torch.tensor([[5, 6]]), committed=torch.tensor([[True, True]]),
        initial_canvas=torch.tensor([MASK, MASK]), commit_step=torch.tensor([0, 0]),
        confidence_at_commit=torch.ones(2), prompt_ids=torch.tensor([4]), target_ids=torch.tensor([5, 6, 7]),
        text=None, mask_token_id=MASK, vocab={}, eos_token_id=None, pad_token_id=None)
    evaluator = match_output_regions(torch.tensor([[4, 5, 6]]), torch.tensor([1]), torch.tensor([[5, 6, 7]]),
                                     TOKENIZER.eos_token_id, TOKENIZER.pad_token_id)
    assert sample.correct_tokens == int(evaluator.correct[0]) == 2
    assert result_summary(sample) == "2 of 3 target tokens right (1 wrong, marked ✗)"


def test_the_recorded_output_is_scored_where_the_predictor_changed_it_after_its_last_step(tmp_path, generate):
    """A predictor may pad what follows its first EOS once its steps are done (udlm): the
    result scores that output, as the evaluator does, not the last canvas."""
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    run = generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=1)
    history = load_history(recorder.files_written[0])
    for b, start in enumerate(run.output_start.tolist()):
        assert history.sample(b).output_ids.tolist() == run.prediction["ids"][b, start:].tolist()

    eos, pad = TOKENIZER.eos_token_id, TOKENIZER.pad_token_id
    last, output, target = [5, eos, 6, eos], [5, eos, pad, pad], [5, 7, 6, eos]
    sample = SampleHistory(
        sample_id=0, output_start=1, steps=torch.tensor([0]), topk_ids=torch.zeros(1, 4, 1, dtype=torch.long),
        topk_probs=torch.ones(1, 4, 1), canvas=torch.tensor([last]), committed=torch.ones(1, 4, dtype=torch.bool),
        initial_canvas=torch.full((4,), MASK), commit_step=torch.zeros(4, dtype=torch.long),
        confidence_at_commit=torch.ones(4), prompt_ids=torch.tensor([4]), target_ids=torch.tensor(target),
        text=None, mask_token_id=MASK, vocab={}, eos_token_id=eos, pad_token_id=pad,
        output_ids=torch.tensor(output))
    evaluator = match_output_regions(torch.tensor([[4, *output]]), torch.tensor([1]), torch.tensor([target]),
                                     eos, pad)
    assert sample.correct_tokens == int(evaluator.correct[0]) == 1
    assert sample.wrong[-1].tolist() == [False, True, True, True]
    assert result_summary(sample) == ("1 of 4 target tokens right (3 wrong, marked ✗; 2 of them replaced in "
                                      "the output after the last step (e.g. padding after its first EOS))")


def test_an_empty_output_is_said_to_be_empty(tmp_path, generate):
    """``output: `` (a sample that ended at once) read as if the output were missing."""
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[2], gen_len=3, commits_per_step=[3], seed=1)
    sample = dataclasses.replace(load_history(recorder.files_written[0]).sample(0), text="")
    assert "output: (empty)" in format_replay(sample, color=False).splitlines()
    assert "**decoded output:** \\(empty\\)" in overview_markdown(sample, sample.token)  # shown as (empty)
    console = Console(record=True, width=120)
    play(sample, console=console, delay=0)
    assert console.export_text().rstrip().endswith("output: (empty)")
