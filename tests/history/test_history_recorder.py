"""HistoryTopKPlugin: what it records, per sample, against hand-computed and engine values."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryError, HistoryTopKPlugin, load_history
from xdllm.interfaces import DenoisingStep, PredictionDict

MASK = 1


def _prediction(ids: torch.Tensor, output_start: torch.Tensor) -> PredictionDict:
    rows = ids.shape[0]
    return PredictionDict(loss=None, text=["out"] * rows, ids=ids, time_taken=[0.0] * rows,
                          output_start_idx=output_start, steps_taken=[2] * rows)


def _hand_step(step: int, canvas: torch.Tensor, output_start: list[int],
               window_probs: list[list[list[float]]], committed: list[list[bool]],
               confidence: list[list[float]], k: int,
               window_valid: list[list[bool]] | None = None) -> DenoisingStep:
    """A step as the predictor hands it over: the top-k of hand-written window distributions."""
    top = torch.tensor(window_probs).topk(k, dim=-1)
    valid = (torch.ones(top.values.shape[:2], dtype=torch.bool) if window_valid is None
             else torch.tensor(window_valid))
    return DenoisingStep(
        step=step, canvas=canvas, output_start=torch.tensor(output_start), window_valid=valid,
        topk_ids=top.indices, topk_probs=top.values, committed=torch.tensor(committed),
        confidence=torch.tensor(confidence), active=torch.ones(len(output_start), dtype=torch.bool))


def _hand_run(recorder: HistoryTopKPlugin) -> None:
    """One sample: prompt token 5 at position 0, two masked positions, two steps, V = 6."""
    output_start = torch.tensor([1])
    canvas = torch.tensor([[5, MASK, MASK]])
    recorder.begin({"input_ids": torch.tensor([[5]]), "attention_mask": torch.tensor([[True]])},
                   canvas, output_start)
    probs0 = [[[0.1, 0, 0.6, 0.3, 0, 0], [0.5, 0, 0.25, 0.15, 0.1, 0]]]
    canvas[0, 2] = 0
    recorder.on_step(_hand_step(0, canvas, [1], probs0, [[False, True]], [[0.0, 0.5]], k=2))
    probs1 = [[[0.7, 0, 0.1, 0.2, 0, 0], [0.4, 0, 0.3, 0.2, 0.1, 0]]]
    canvas[0, 1] = 0
    recorder.on_step(_hand_step(1, canvas, [1], probs1, [[True, False]], [[0.7, 0.0]], k=2))
    recorder.end(_prediction(canvas, output_start))


def test_hand_computed_sample(tmp_path):
    tokenizer = SymbolTokenizer(["a", "x"])  # ids: 4 -> a, 5 -> x
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, tokenizer=tokenizer)
    _hand_run(recorder)
    [path] = recorder.files_written
    assert path == tmp_path / "history-00000.pt"
    sample = load_history(path).sample(0)
    assert sample.output_start == 1 and sample.steps.tolist() == [0, 1]
    assert sample.topk_ids.tolist() == [[[2, 3], [0, 2]], [[0, 3], [0, 2]]]
    expected_probs = torch.tensor([[[0.6, 0.3], [0.5, 0.25]], [[0.7, 0.2], [0.4, 0.3]]])
    torch.testing.assert_close(sample.topk_probs, expected_probs, atol=1e-3, rtol=0)
    assert sample.canvas.tolist() == [[MASK, 0], [0, 0]]
    assert sample.committed.tolist() == [[False, True], [True, False]]
    assert sample.commit_step.tolist() == [1, 0]
    torch.testing.assert_close(sample.confidence_at_commit, torch.tensor([0.7, 0.5]))
    assert sample.masks_remaining.tolist() == [1, 0]
    assert sample.initial_canvas.tolist() == [MASK, MASK]
    assert sample.prompt_ids.tolist() == [5]
    assert sample.text == "out" and sample.mask_token_id == MASK
    assert [sample.token(i) for i in (0, 1, 2, 3, 5)] == ["<pad>", "<mask>", "<bos>", "<eos>", "x"]


class BracketedTokenizer(SymbolTokenizer):
    """Shows tokens differently from their vocabulary strings, as byte-level BPE does."""

    def display_token(self, token_id: int) -> str:
        return f"[{self.id_to_token(token_id)}]"


def test_history_files_store_the_tokens_as_views_show_them(tmp_path):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, tokenizer=BracketedTokenizer(["a", "x"]))
    _hand_run(recorder)
    sample = load_history(recorder.files_written[0]).sample(0)
    assert [sample.token(i) for i in (1, 5)] == ["[<mask>]", "[x]"]


def test_matches_engine_per_sample(tmp_path, generate):
    """Rows with different output starts and finishing steps: each sample's view equals the
    engine's states restricted to the steps it ran and to its own output region."""
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path, mask_token_id=MASK)
    run = generate(recorder, prompt_lens=[2, 4, 3], gen_len=5, commits_per_step=[1, 2, 3], seed=3)
    history = load_history(recorder.files_written[0])
    assert len(history) == 3 and history.sample_ids == [0, 1, 2]
    for b in range(3):
        sample = history.sample(b)
        start = int(run.output_start[b])
        ran = [s for s in run.steps if bool(s.active[b])]
        assert sample.steps.tolist() == [s.step for s in ran]
        assert sample.num_steps == math.ceil((7 - (start - 2)) / (b + 1))
        # the engine's own distributions, never handed to the recorder
        distributions = [p for p, s in zip(run.probs, run.steps) if bool(s.active[b])]
        top = torch.stack([p[b, start:] for p in distributions]).topk(3, dim=-1)
        assert torch.equal(sample.topk_ids, top.indices)
        torch.testing.assert_close(sample.topk_probs, top.values, atol=1e-3, rtol=1e-3)
        region = run.prediction["ids"].shape[1] - start  # window offsets 0..region-1
        assert torch.equal(sample.canvas, torch.stack([s.canvas[b, start:] for s in ran]))
        assert torch.equal(sample.committed, torch.stack([s.committed[b, :region] for s in ran]))
        assert torch.equal(sample.initial_canvas, run.initial_canvas[b, start:])
        assert bool((sample.committed.sum(0) == 1).all())  # every output position once
        commit_index = sample.committed.float().argmax(0)
        assert torch.equal(sample.commit_step, sample.steps[commit_index])
        expected_conf = torch.stack([s.confidence[b, :region] for s in ran])[
            commit_index, torch.arange(len(commit_index))]
        torch.testing.assert_close(sample.confidence_at_commit, expected_conf)
        assert sample.masks_remaining.tolist() == [
            int((s.canvas[b, start:] == MASK).sum()) for s in ran]
        assert sample.prompt_ids.tolist() == run.batch["input_ids"][b, :start].tolist()
        assert torch.equal(sample.target_ids, run.batch["target_ids"][b])
        assert sample.text == f"row {b}"


def test_max_samples_spans_batches_and_numbering_continues(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, max_samples=6)
    for batch in range(3):
        generate(recorder, prompt_lens=[2] * 4, gen_len=3, commits_per_step=[1] * 4, seed=batch)
    assert [p.name for p in recorder.files_written] == ["history-00000.pt", "history-00001.pt"]
    assert recorder.samples_recorded == 6
    assert load_history(recorder.files_written[0]).sample_ids == [0, 1, 2, 3]
    assert load_history(recorder.files_written[1]).sample_ids == [4, 5]
    again = HistoryTopKPlugin(k=2, output_dir=tmp_path)
    generate(again, prompt_lens=[2, 2], gen_len=3, commits_per_step=[1, 1], sample_index=[40, 41])
    assert [p.name for p in again.files_written] == ["history-00002.pt"]
    assert load_history(again.files_written[0]).sample_ids == [40, 41]


def test_batch_without_steps(tmp_path):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path)
    canvas, start = torch.tensor([[5, 6]]), torch.tensor([1])
    recorder.begin({}, canvas, start)
    recorder.end(_prediction(canvas, start))
    sample = load_history(recorder.files_written[0]).sample(0)
    assert sample.num_steps == 0 and sample.topk_ids.shape == (0, 1, 2)
    assert sample.commit_step.tolist() == [-1] and sample.prompt_ids.numel() == 0


def test_window_offsets_land_on_their_canvas_columns(tmp_path):
    """Rows whose regions start at different columns and end before the canvas does: window
    offset o of row b is stored at canvas column output_start[b] + o, and recorded columns
    outside a row's region hold zeros."""
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, mask_token_id=MASK)
    canvas = torch.tensor([[5, MASK, MASK, 6, 7], [5, 6, 7, MASK, 8]])
    output_start = torch.tensor([1, 3])
    recorder.begin({}, canvas, output_start)
    window_probs = [[[0.1, 0.9, 0, 0], [0, 0.2, 0.8, 0]],
                    [[0, 0, 0.3, 0.7], [0.25, 0.25, 0.25, 0.25]]]  # row 1, offset 1: not real
    canvas[0, 1:3] = torch.tensor([9, 9])
    canvas[1, 3] = 9
    recorder.on_step(_hand_step(0, canvas, [1, 3], window_probs, [[True, True], [True, False]],
                                [[0.9, 0.8], [0.7, 0.0]], k=2,
                                window_valid=[[True, True], [True, False]]))
    recorder.end(_prediction(canvas, output_start))
    raw = load_history(recorder.files_written[0]).raw
    assert raw["region_start"] == 1 and raw["topk_ids"].shape == (2, 1, 4, 2)
    assert raw["topk_ids"][:, 0].tolist() == [[[1, 0], [2, 1], [0, 0], [0, 0]],
                                              [[0, 0], [0, 0], [3, 2], [0, 0]]]
    torch.testing.assert_close(raw["topk_probs"][:, 0].float(), torch.tensor(
        [[[0.9, 0.1], [0.8, 0.2], [0, 0], [0, 0]], [[0, 0], [0, 0], [0.7, 0.3], [0, 0]]]),
        atol=1e-3, rtol=0)
    assert raw["committed"][:, 0].tolist() == [[True, True, False, False],
                                               [False, False, True, False]]
    assert raw["commit_step"].tolist() == [[0, 0, -1, -1], [-1, -1, 0, -1]]
    torch.testing.assert_close(raw["confidence_at_commit"][1, 2], torch.tensor(0.7))
    assert raw["canvas"][:, 0].tolist() == [[9, 9, 6, 7], [6, 7, 9, 8]]


def test_misuse_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="k must be >= 1"):
        HistoryTopKPlugin(k=0, output_dir=tmp_path)
    canvas = torch.tensor([[5, MASK]])
    step = _hand_step(0, canvas, [1], [[[0.2, 0.3, 0.5]]], [[True]], [[0.5]], k=3)
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path)
    with pytest.raises(HistoryError, match="before begin"):
        recorder.on_step(step)
    recorder.begin({}, canvas, torch.tensor([1]))
    with pytest.raises(HistoryError, match="top 3 tokens per position, the recorder keeps k=2"):
        recorder.on_step(step)


class _ScalarReads(TorchDispatchMode):
    """Counts operations that copy a value to the host (``.item()``, ``int()``, ``bool()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_on_step_never_reads_device_values(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path)
    run = generate(None, prompt_lens=[2, 3], gen_len=6, commits_per_step=[1, 2])
    recorder.begin(run.batch, run.initial_canvas.clone(), run.output_start)
    with _ScalarReads() as reads:
        for state in run.steps:
            recorder.on_step(state)
    assert reads.count == 0
    recorder.end(run.prediction)
    assert len(load_history(recorder.files_written[0])) == 2
