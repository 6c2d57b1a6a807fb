"""What the engine hands a history recorder: window top-k only, and the right top-k."""

from __future__ import annotations

import pytest
import torch
from predict_fakes import MASK, VOCAB, LetterTokenizer, PositionTableModel, letter, prompt_batch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from xdllm.history import HistoryTopKPlugin, load_history
from xdllm.interfaces import DenoisingStep, HistoryRecorder
from xdllm.predict import UnmaskingPredictor
from xdllm.predict.sampling import never_generated_ids

# Infilling rows with different region starts and lengths; row 0 finishes after one step.
INFILL = torch.tensor([[2, letter("a"), MASK, letter("b"), 4, 4, 4],
                       [2, MASK, MASK, MASK, MASK, letter("c"), 4]])
BATCHES = {
    "infill": {"input_ids": INFILL, "attention_mask": torch.ones_like(INFILL, dtype=torch.bool)},
    "continuation": prompt_batch([[letter("a")], [letter("b"), letter("c")], []], "right"),
}
# (output_start, region length) of every row; 5 new tokens after right-padded prompts
REGIONS = {"infill": [(2, 1), (1, 4)], "continuation": [(2, 5), (3, 5), (1, 5)]}


def hand_built_model() -> PositionTableModel:
    """Logits depend on the position only; distinct values, so every top-k is unambiguous."""
    table = torch.randn(16, VOCAB, generator=torch.Generator().manual_seed(5)) * 2.0
    return PositionTableModel(table)


def predictor(name: str) -> UnmaskingPredictor:
    """Four steps; 5 new tokens for the continuation batch, the masks already there for infill."""
    return UnmaskingPredictor(max_steps=4, max_new_tokens=None if name == "infill" else 5,
                              tokenizer=LetterTokenizer(), confidence="top_prob")


class ShapeCheckingHistory:
    """A recorder asserting that every step holds window-sized tensors and none of ``VOCAB``."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.steps = 0

    def begin(self, batch, canvas, output_start) -> None:
        self.canvas_shape = tuple(canvas.shape)

    def on_step(self, state: DenoisingStep) -> None:
        rows, width = state.window_valid.shape
        expected = {
            "canvas": (self.canvas_shape, torch.long), "output_start": ((rows,), torch.long),
            "window_valid": ((rows, width), torch.bool), "topk_ids": ((rows, width, self.k), None),
            "topk_probs": ((rows, width, self.k), torch.float32),
            "committed": ((rows, width), torch.bool), "confidence": ((rows, width), torch.float32),
            "active": ((rows,), torch.bool),
        }
        for name, (shape, dtype) in expected.items():
            value = getattr(state, name)
            assert tuple(value.shape) == shape, name
            assert VOCAB not in value.shape, name
            assert dtype is None or value.dtype == dtype, name
        self.steps += 1

    def end(self, prediction) -> None:
        pass


@pytest.mark.parametrize("name", BATCHES)
def test_the_recorder_gets_no_vocabulary_sized_tensor(name):
    # batch, canvas, window and k sizes all differ from VOCAB = 20
    history = ShapeCheckingHistory(k=3)
    assert isinstance(history, HistoryRecorder)
    prediction = predictor(name).predict(BATCHES[name], model=hand_built_model(), history=history)
    assert history.steps == max(prediction["steps_taken"]) > 0


class _VocabSizedOutputs(TorchDispatchMode):
    """Shapes of every tensor an operation produces with a ``VOCAB``-sized last dimension."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.shapes += [tuple(t.shape) for t in tree_leaves(out)
                        if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == VOCAB]
        return out


@pytest.mark.parametrize("name", BATCHES)
def test_recording_adds_no_vocabulary_sized_work(name, tmp_path):
    """The engine's vocabulary-sized tensors are the same with and without a recorder."""
    def vocab_sized(history) -> list[tuple[int, ...]]:
        model = hand_built_model()
        with _VocabSizedOutputs() as seen:
            predictor(name).predict(BATCHES[name], model=model, history=history)
        return seen.shapes

    without = vocab_sized(None)
    assert without  # the model's logits and the step's distributions
    assert vocab_sized(HistoryTopKPlugin(k=3, output_dir=tmp_path)) == without


@pytest.mark.parametrize("name", BATCHES)
def test_stored_top_k_is_the_model_s_top_k(name, tmp_path):
    """The file holds, for every step a sample ran and every position of its region, the top-k
    of the model's distribution there (mask, padding and BOS tokens banned), computed here from
    the table."""
    model = hand_built_model()
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path, mask_token_id=MASK)
    prediction = predictor(name).predict(BATCHES[name], model=model, history=recorder)
    logits = model.table.clone()
    logits[:, list(never_generated_ids(LetterTokenizer()))] = float("-inf")
    expected = logits.softmax(-1).topk(3, dim=-1)  # per RoPE position = canvas column here
    history = load_history(recorder.files_written[0])
    for b, (start, region) in enumerate(REGIONS[name]):
        sample = history.sample(b)
        assert sample.output_start == start
        assert sample.num_steps == prediction["steps_taken"][b] > 0
        columns = torch.arange(start, start + region)
        for s in range(sample.num_steps):
            assert torch.equal(sample.topk_ids[s, :region], expected.indices[columns])
            torch.testing.assert_close(sample.topk_probs[s, :region], expected.values[columns],
                                       atol=1e-3, rtol=1e-3)
        # recorded columns past the row's region are not the row's to fill: zeros
        assert not sample.topk_ids[:, region:].any() and not sample.topk_probs[:, region:].any()


def test_a_recorder_asking_for_more_tokens_than_the_vocabulary_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"top k=25 tokens per position; k must be in 1..{VOCAB}"):
        predictor("continuation").predict(BATCHES["continuation"], model=hand_built_model(),
                                          history=HistoryTopKPlugin(k=25, output_dir=tmp_path))


class _ScalarReads(TorchDispatchMode):
    """Counts operations that copy a value to the host (``.item()``, ``int()``, ``bool()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_recording_adds_no_host_reads_per_step(tmp_path):
    """The CPU stand-in for the CUDA sync count: what recording adds does not grow with steps."""
    def reads(n_tokens: int, record: bool) -> int:
        history = HistoryTopKPlugin(k=3, output_dir=tmp_path / f"{n_tokens}") if record else None
        engine = UnmaskingPredictor(max_steps=n_tokens, max_new_tokens=n_tokens,
                                    tokenizer=LetterTokenizer(), confidence="top_prob")
        with _ScalarReads() as seen:
            prediction = engine.predict(BATCHES["continuation"], model=hand_built_model(),
                                        history=history)
        assert prediction["steps_taken"] == [n_tokens] * 3
        return seen.count

    assert reads(8, True) - reads(4, True) == reads(8, False) - reads(4, False)
