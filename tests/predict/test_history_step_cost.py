"""A recorded denoising step costs the history one device copy per kept tensor and nothing on
the host: no ``.cpu()``, ``.tolist()``, ``.item()`` or truth value, no scalar read; the batch's
file is written after one device-to-host copy (on CUDA, counted)."""

import pytest
import torch
from predict_fakes import LetterTokenizer, PositionTableModel, prompt_batch
from torch.utils._python_dispatch import TorchDispatchMode

from xdllm.history import HistoryTopKPlugin, load_history
from xdllm.predict import UnmaskingPredictor

HOST_READS = ("cpu", "tolist", "item", "numpy", "__bool__", "__int__", "__float__", "__index__")


class _Operations(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class _SpiedRecorder(HistoryTopKPlugin):
    """Records each step under an operation spy, with every host read of a tensor forbidden."""

    def __init__(self, monkeypatch, **options) -> None:
        super().__init__(**options)
        self.monkeypatch = monkeypatch
        self.step_operations: list[list[str]] = []

    def on_step(self, state) -> None:
        with self.monkeypatch.context() as patch:
            for name in HOST_READS:
                patch.setattr(torch.Tensor, name, _forbidden(name))
            with _Operations() as operations:
                super().on_step(state)
        self.step_operations.append(operations.names)


def _forbidden(name):
    def read(*args, **kwargs):
        raise AssertionError(f"Tensor.{name} called while recording a step")
    return read


def _run(tmp_path, monkeypatch):
    table = torch.randn(40, 20, generator=torch.Generator().manual_seed(0)) * 2.0
    model = PositionTableModel(table)
    predictor = UnmaskingPredictor(max_steps=6, max_new_tokens=6, tokenizer=LetterTokenizer(), confidence="entropy",
                                   temperature=0.5)
    recorder = _SpiedRecorder(monkeypatch, k=3, output_dir=tmp_path)
    prediction = predictor.predict(prompt_batch([[4], [5, 6, 7], []]), model=model, history=recorder)
    return recorder, prediction


def test_a_recorded_step_is_a_few_device_copies_and_no_host_work(tmp_path, monkeypatch):
    recorder, prediction = _run(tmp_path, monkeypatch)
    assert len(recorder.step_operations) == max(prediction["steps_taken"]) == 6
    first, *others = recorder.step_operations
    copies = [name for name in first if name in ("_to_copy", "clone")]
    assert len(copies) == 7  # the window layout (first step only), top-k ids and probs, canvas, commits, ...
    for operations in others:
        assert [name for name in operations if name in ("_to_copy", "clone")] == copies[1:]
        assert set(operations) <= {"_to_copy", "clone", "slice"}, operations
    sample = load_history(recorder.files_written[0]).sample(1)
    assert sample.num_steps == 6 and sample.topk_ids.shape == (6, 6, 3)


class _CountingEnd(HistoryTopKPlugin):
    """Counts the ``.cpu()`` calls on device tensors while a batch's file is made."""

    def __init__(self, monkeypatch, **options) -> None:
        super().__init__(**options)
        self.monkeypatch = monkeypatch
        self.host_copies = 0

    def end(self, prediction) -> None:
        to_host = torch.Tensor.cpu

        def counting(tensor, *args, **kwargs):
            self.host_copies += tensor.device.type != "cpu"
            return to_host(tensor, *args, **kwargs)

        with self.monkeypatch.context() as patch:
            patch.setattr(torch.Tensor, "cpu", counting)
            super().end(prediction)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_batch_reaches_the_host_in_one_copy(tmp_path, monkeypatch):
    table = torch.randn(40, 20, generator=torch.Generator().manual_seed(0))
    predictor = UnmaskingPredictor(max_steps=6, max_new_tokens=6, tokenizer=LetterTokenizer())
    recorder = _CountingEnd(monkeypatch, k=3, output_dir=tmp_path)
    batch = {key: value.cuda() for key, value in prompt_batch([[4], [5, 6, 7], []]).items()}
    prediction = predictor.predict(batch, model=PositionTableModel(table).cuda(), history=recorder)
    assert prediction["steps_taken"] == [6, 6, 6]
    assert recorder.host_copies == 1
    assert load_history(recorder.files_written[0]).sample(0).num_steps == 6
