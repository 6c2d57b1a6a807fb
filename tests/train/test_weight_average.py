"""optim.ema_decay: a moving average of the weights, validated on, saved, resumed and generated with."""

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.checkpoint import load_trained
from xdllm.train.checkpoint_io import read_checkpoint_file
from xdllm.train.weight_average import CHECKPOINT_KEY, WeightAverage, averaged_state_dict, effective_decay


def _model(dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4)).to(dtype)
    model[1].bias.requires_grad_(False)  # not trained: not averaged
    return model


def test_each_update_moves_the_averages_by_the_warmed_up_decay():
    model = _model()
    average = WeightAverage(model, decay=0.9)
    assert average.names == ["0.weight", "0.bias", "1.weight"]
    expected = [p.detach().clone() for p in average.parameters]
    for step in range(1, 101):
        with torch.no_grad():
            for parameter in average.parameters:
                parameter.add_(torch.randn_like(parameter))
        average.update()
        decay = min(0.9, (1 + step) / (10 + step))
        assert effective_decay(0.9, step) == decay
        expected = [decay * e + (1 - decay) * p.detach() for e, p in zip(expected, average.parameters)]
        for got, want in zip(average.averages, expected):
            torch.testing.assert_close(got, want)
    assert average.updates == 100 and effective_decay(0.9, 100) == 0.9  # warm-up over: the decay itself


def test_low_precision_weights_keep_a_float32_average():
    model = _model(torch.bfloat16)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(1.0)
    average = WeightAverage(model, decay=0.9999)
    average.updates = 10**6  # past the warm-up: each update moves by 1e-4 of the difference
    with torch.no_grad():
        for parameter in average.parameters:
            parameter.add_(2.0**-6)  # 1.015625 in bf16
    average.update()
    for value in average.averages:  # 1 + 1.5625e-6: no bf16 number lies that close to 1
        assert value.dtype == torch.float32
        torch.testing.assert_close(value, torch.full_like(value, 1 + 1e-4 * 2.0**-6), rtol=0, atol=1e-7)


def test_apply_and_restore_swap_the_weights_exactly():
    model = _model()
    average = WeightAverage(model, decay=0.5)
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for parameter in average.parameters:
            parameter.mul_(3.0)
    average.update()
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    average.apply()
    for name, value in zip(average.names, average.averages):
        assert torch.equal(model.state_dict()[name], value)
    assert torch.equal(model.state_dict()["1.bias"], trained["1.bias"])  # untrained: untouched
    with pytest.raises(RuntimeError, match="already"):
        average.apply()
    average.restore()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in moved.items())
    with pytest.raises(RuntimeError, match="not called"):
        average.restore()


def test_a_checkpoint_average_of_another_model_is_refused():
    average = WeightAverage(_model(), decay=0.5)
    state = average.state()
    state["weights"]["2.weight"] = state["weights"].pop("1.weight")
    with pytest.raises(ValueError, match=r"missing: \['1.weight'\], unknown: \['2.weight'\]"):
        average.load_state(state)


def test_tied_weights_are_averaged_once_and_saved_under_each_name():
    model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(5, 3), "head": torch.nn.Linear(3, 5, bias=False)})
    model["head"].weight = model["embed"].weight
    average = WeightAverage(model, decay=0.5)
    assert average.names == ["embed.weight"] and len(average.averages) == 1
    with torch.no_grad():
        model["embed"].weight.add_(1.0)
    average.update()
    weights = average.state()["weights"]
    assert sorted(weights) == ["embed.weight", "head.weight"] and weights["embed.weight"] is weights["head.weight"]
    model.load_state_dict(averaged_state_dict(model.state_dict(), {CHECKPOINT_KEY: average.state()}))
    assert torch.equal(model["head"].weight, average.averages[0])
    average.load_state(average.state())


def _scalars(run_dir: Path, tag: str) -> dict[int, float]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


COMMON = [*TINY, "trainer.max_steps=8", "trainer.val_check_interval=4", "checkpoint.save_every_n_steps=4",
          "data.eval_batch_size=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ema")
    assert main(["train", *COMMON, f"run_dir={root / 'plain'}"]) == 0
    assert main(["train", *COMMON, "optim.ema_decay=0.5", f"run_dir={root / 'ema'}"]) == 0
    return root


@pytest.mark.slow
def test_the_average_leaves_training_alone_and_is_what_validation_and_generation_use(runs, capsys):
    plain, ema = runs / "plain", runs / "ema"
    assert _scalars(ema, "train/loss") == _scalars(plain, "train/loss")  # restored exactly after validation
    last = read_checkpoint_file(ema / "checkpoints" / "last.ckpt")
    plain_state = read_checkpoint_file(plain / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(torch.equal(value, plain_state[name]) for name, value in last["state_dict"].items())
    entry = last[CHECKPOINT_KEY]
    assert entry["decay"] == 0.5 and entry["updates"] == 8
    trained = load_trained(ema / "checkpoints" / "last.ckpt", ema=False)
    averaged = load_trained(ema / "checkpoints" / "last.ckpt")
    assert (trained.ema, averaged.ema, load_trained(plain).ema) == (False, True, None)
    assert ", ema=True, checkpoint=" in repr(averaged) and ", ema=False, " in repr(trained)
    state = averaged.model.state_dict()
    assert set(entry["weights"]) <= set(state)
    for name, value in entry["weights"].items():
        assert torch.equal(state[name], value)
        assert torch.equal(trained.model.state_dict()[name], last["state_dict"][f"model.{name}"])
    head = "transformer.lm_head.weight"
    assert not torch.equal(entry["weights"][head], last["state_dict"][f"model.{head}"])
    # val/loss at step 8 is the averaged model's: eval reproduces it with the same batches
    val_loss = _scalars(ema, "val/loss")[8]
    capsys.readouterr()
    for flag, matches in (("true", True), ("false", False)):
        assert main(["eval", f"ckpt={ema / 'checkpoints' / 'last.ckpt'}", "split=validation", "batch_size=16",
                     f"ema={flag}"]) == 0
        out = capsys.readouterr().out
        loss = float(out.split('"loss": ')[1].split(",")[0])
        assert (loss == pytest.approx(val_loss, rel=1e-5)) == matches, (flag, loss, val_loss)


@pytest.mark.slow
def test_a_resumed_run_continues_the_average(runs, tmp_path):
    resumed = tmp_path / "resumed"
    snapshot = runs / "ema" / "checkpoints" / "step0000004.ckpt"
    assert main(["train", *COMMON, "optim.ema_decay=0.5", f"run_dir={resumed}", f"resume={snapshot}"]) == 0
    full = read_checkpoint_file(runs / "ema" / "checkpoints" / "last.ckpt")[CHECKPOINT_KEY]
    continued = read_checkpoint_file(resumed / "checkpoints" / "last.ckpt")[CHECKPOINT_KEY]
    assert continued["updates"] == full["updates"] == 8
    for name, value in full["weights"].items():
        torch.testing.assert_close(continued["weights"][name], value, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_resuming_a_run_without_an_average_starts_one_and_says_so(runs, tmp_path, capsys):
    snapshot = runs / "plain" / "checkpoints" / "step0000004.ckpt"
    assert main(["train", *COMMON, "optim.ema_decay=0.5", f"run_dir={tmp_path / 'run'}", f"resume={snapshot}"]) == 0
    assert ("the checkpoint of step 4 has no weight average: optim.ema_decay=0.5 starts one from its weights"
            in capsys.readouterr().err)
    entry = read_checkpoint_file(tmp_path / "run" / "checkpoints" / "last.ckpt")[CHECKPOINT_KEY]
    assert entry["updates"] == 4  # steps 5-8
