"""ReMDM (``sampler=remdm``): one step's probabilities, whole runs against the definition (and the
forward passes the steps that reveal), the marginals they keep, and the refusals (batch
invariance: ``test_mdlm_predictor.py``)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from host_sync_counter import count_host_syncs  # noqa: E402
from predict_fakes import BOS, MASK, LetterTokenizer, PositionTableModel, letter, position_table, prompt_batch  # noqa: E402

from xdllm.diffusion.schedules import make_noise_schedule  # noqa: E402
from xdllm.predict import streams  # noqa: E402
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids  # noqa: E402
from xdllm_models.mdlm.predictor import MDLMPredictor  # noqa: E402
from xdllm_models.mdlm.remdm import RemaskingSchedule, remdm_step  # noqa: E402

TOK = LetterTokenizer()
LOG_LINEAR = make_noise_schedule("log_linear")
ROWS = 20000
# four masks, then two revealed tokens written with probabilities 0.9 and 0.1
WINDOW = torch.tensor([[MASK] * 4 + [letter("a"), letter("b")]]).repeat(ROWS, 1)
WRITTEN = torch.tensor([[0.0] * 4 + [0.9, 0.1]]).repeat(ROWS, 1)


def _schedule(name: str, eta: float | None = None, **loop) -> RemaskingSchedule:
    return RemaskingSchedule.from_options(name, eta, loop.get("t_on"), loop.get("t_off"), loop.get("alpha_on"),
                                          "test")


def _shares(schedule: RemaskingSchedule, step: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The share of the four masks revealed and of each revealed token masked again."""
    tokens = torch.full_like(WINDOW, letter("c"))
    out = remdm_step(schedule, schedule.unmasked_shares(steps, LOG_LINEAR), step, WINDOW, tokens,
                     torch.full(WINDOW.shape, 0.5), WRITTEN, torch.ones_like(WINDOW, dtype=torch.bool),
                     streams.row_keys(0, torch.arange(ROWS)), MASK)
    assert (out.window[out.revealed] == letter("c")).all() and (out.window[out.remasked] == MASK).all()
    assert (out.written_probs[out.revealed] == 0.5).all()
    return out.revealed[:, :4].double().mean(), out.remasked[:, 4:].double().mean(0)


@pytest.mark.parametrize(("name", "eta", "reveal", "remask"), [
    # step 5 of 10 (log-linear): alpha goes from 0.5 to 0.6, sigma_max = (1 - 0.6) / 0.5 = 0.8
    ("cap", 0.1, (0.6 - 0.9 * 0.5) / 0.5, [0.1, 0.1]),
    ("cap", 0.95, (0.6 - 0.2 * 0.5) / 0.5, [0.8, 0.8]),  # capped at sigma_max
    ("rescale", 0.5, (0.6 - 0.6 * 0.5) / 0.5, [0.4, 0.4]),
    # conf: sigma_max shared by softmax(-0.9, -0.1); masks revealed as in MDLM
    ("conf", None, 0.2, [0.8 / (1 + torch.e ** 0.8), 0.8 / (1 + torch.e ** -0.8)]),
])
def test_one_step_reveals_and_masks_again_with_the_posterior_probabilities(name, eta, reveal, remask):
    revealed, remasked = _shares(_schedule(name, eta), 5, 10)
    assert revealed == pytest.approx(reveal, abs=0.01)  # 80k draws: 4 standard errors below 0.01
    assert remasked.tolist() == pytest.approx(remask, abs=0.015)


def test_the_loop_masks_again_at_its_plateau_and_not_outside_it():
    schedule = _schedule("loop", 0.05)
    # step 10 of 20: t from 0.5 to 0.45, inside [t_off, t_on] = [0.05, 0.55]: alpha stays 0.9
    revealed, remasked = _shares(schedule, 10, 20)
    assert revealed == pytest.approx(0.05 * 0.9 / 0.1, abs=0.01)
    assert remasked.tolist() == pytest.approx([0.05, 0.05], abs=0.005)
    # step 2 of 20: t from 0.9 to 0.85, alpha from 0.9 * 0.1 / 0.45 to 0.9 * 0.15 / 0.45: plain MDLM
    revealed, remasked = _shares(schedule, 2, 20)
    assert revealed == pytest.approx((0.3 - 0.2) / 0.8, abs=0.01)
    assert remasked.tolist() == [0.0, 0.0]
    assert _schedule("loop", 0.5).remask_share(0.9, 0.9) == pytest.approx(0.1 / 0.9)  # at most sigma_max


TABLE = position_table({p: {letter("a"): 0.5, letter("b"): 0.3, letter("c"): 0.2} for p in range(2, 12)})


def _run(max_steps: int, rows: int = 2000, **options) -> tuple[dict, PositionTableModel]:
    model = PositionTableModel(TABLE)
    predictor = MDLMPredictor(max_steps=max_steps, max_new_tokens=6, tokenizer=TOK, sampler="remdm",
                              confidence=None, **options)
    out = predictor.predict(prompt_batch([[letter("d")]] * rows, sample_index=torch.arange(rows)), model=model)
    return out, model


def _reference(max_steps: int, rows: int, **options) -> tuple[list[torch.Tensor], torch.Tensor]:
    """ReMDM by its definition: every step of every row from the model's distribution (the
    table's, which depends on the position only), with the predictor's draws. The output
    windows before each step and after the last, and each row's steps that revealed a mask."""
    schedule = _schedule(options.get("remdm_schedule", "cap"), options.get("remdm_eta"))
    keys = streams.row_keys(0, torch.arange(rows))
    probs = final_distribution(TABLE[2:8].expand(rows, 6, -1), 1.0, None, None, never_generated_ids(TOK))
    shares = schedule.unmasked_shares(max_steps, LOG_LINEAR)
    window, written = torch.full((rows, 6), MASK), torch.zeros(rows, 6)
    windows, revealing = [window], torch.zeros(rows, dtype=torch.long)
    for step in range(max_steps):
        tokens = choose_tokens(probs, streams.uniforms(keys, step, streams.Purpose.TOKEN, 6))
        token_probs = probs.gather(-1, tokens[..., None])[..., 0]
        out = remdm_step(schedule, shares, step, window, tokens, token_probs, written,
                         torch.ones_like(window, dtype=torch.bool), keys, MASK)
        window, written = out.window, out.written_probs
        windows.append(window)
        revealing += out.revealed.any(1)
    return windows, revealing


@pytest.mark.parametrize(("options", "steps"), [
    ({"remdm_schedule": "cap", "remdm_eta": 0.3}, 10),
    ({"remdm_schedule": "cap"}, 60),  # many more steps than tokens: most steps reveal nothing
    ({"remdm_schedule": "rescale", "remdm_eta": 0.5}, 10),
    ({"remdm_schedule": "conf"}, 10),
    ({"remdm_schedule": "loop", "remdm_eta": 0.05}, 20),
])
def test_the_predictor_is_remdm_by_its_definition_and_runs_the_model_only_to_reveal(options, steps):
    """A step that reveals nothing in a row masks again without the model: the samples are the
    definition's, the forward passes those of the steps that reveal."""
    out, model = _run(steps, rows=300, **options)
    windows, revealing = _reference(steps, 300, **options)
    assert torch.equal(out["ids"][:, 2:], windows[-1]) and (out["ids"] != MASK).all()
    assert (out["ids"][:, :2] == torch.tensor([BOS, letter("d")])).all()  # the prompt is never masked
    assert out["steps_taken"] == revealing.tolist()
    assert sum(len(call) for call in model.calls) == int(revealing.sum()) < 300 * steps


@pytest.mark.parametrize(("options", "steps"), [
    ({"remdm_schedule": "cap", "remdm_eta": 0.3}, 10),
    ({"remdm_schedule": "rescale", "remdm_eta": 0.5}, 10),
    ({"remdm_schedule": "loop", "remdm_eta": 0.05}, 20),
])
def test_every_step_keeps_the_forward_processs_share_of_masks(options, steps):
    """(Not ``conf``: as in the reference code, its masks are revealed as in MDLM while revealed
    tokens are masked again, so its share of masks runs above the schedule's.)"""
    windows, _ = _reference(steps, 2000, **options)
    schedule = _schedule(options["remdm_schedule"], options.get("remdm_eta"))
    for step, (window, share) in enumerate(zip(windows, schedule.unmasked_shares(steps, LOG_LINEAR))):
        expected = 1.0 - share
        assert (window == MASK).double().mean() == pytest.approx(expected, abs=0.02), step
    taken_back = sum(int(((before != MASK) & (after == MASK)).sum()) for before, after in zip(windows, windows[1:]))
    assert taken_back > 1000  # tokens really were masked again


def test_eta_zero_never_masks_a_token_again():
    windows, _ = _reference(8, 200, remdm_eta=0.0)
    for before, after in zip(windows, windows[1:]):
        assert ((before != MASK) <= (after == before)).all()  # a revealed token never changes


def test_given_tokens_of_an_infilling_prompt_are_never_masked():
    table = position_table({p: {letter("a"): 0.5, letter("b"): 0.5} for p in range(1, 12)})
    model = PositionTableModel(table)
    predictor = MDLMPredictor(max_steps=12, tokenizer=TOK, sampler="remdm", confidence=None, remdm_eta=0.5)
    given = [letter("e"), MASK, MASK, letter("f"), MASK, letter("g")]
    out = predictor.predict(prompt_batch([given] * 300, sample_index=torch.arange(300)), model=model)
    fixed = torch.tensor([i + 1 for i, token in enumerate(given) if token != MASK])
    for call in model.calls:
        assert (call[:, fixed] == torch.tensor([letter("e"), letter("f"), letter("g")])).all()
    assert (out["ids"] != MASK).all() and max(out["steps_taken"]) <= 12


@pytest.mark.parametrize(("options", "message"), [
    ({"remdm_schedule": "tempered"}, "remdm_schedule must be one of cap, rescale, conf, loop"),
    ({"remdm_eta": 1.5}, r"remdm_eta is a probability, in \[0, 1\]; got 1.5"),
    ({"remdm_eta": -0.1}, "remdm_eta is a probability"),
    ({"remdm_schedule": "conf", "remdm_eta": 0.1}, "remdm_eta=0.1 does not apply"),
    ({"remdm_t_on": 0.5}, r"remdm_t_on=0.5 sets the time profile of remdm_schedule='loop'; the schedule is 'cap'"),
    ({"remdm_schedule": "loop", "remdm_t_on": 0.02}, "0 < remdm_t_off < remdm_t_on < 1"),
    ({"remdm_schedule": "loop", "remdm_alpha_on": 1.0}, r"remdm_alpha_on is the share .* in \(0, 1\); got 1.0"),
    ({"remdm_schedule": "loop", "noise_schedule": "cosine"}, "sets its own time profile"),
    ({"block_size": 3}, "block_size=3 does not apply"),
    ({"stop_at_eos": True}, "stop_at_eos=True does not apply"),
    ({"remask": True}, "ReMDM masks tokens again itself"),
    ({"confidence": "top_prob"}, "confidence='top_prob' does not apply"),
    ({"threshold": 0.9}, "threshold=0.9 does not apply"),
])
def test_remdm_refuses_what_does_not_apply(options, message):
    options = {"confidence": None, **options}
    with pytest.raises(ValueError, match=message):
        MDLMPredictor(max_steps=4, max_new_tokens=4, tokenizer=TOK, sampler="remdm", **options)


@pytest.mark.parametrize("sampler", ["confidence", "ancestral"])
def test_remdm_options_are_refused_with_another_sampler(sampler):
    confidence = "top_prob" if sampler == "confidence" else None
    with pytest.raises(ValueError, match=f"remdm_eta=0.1 is an option of sampler='remdm'; the sampler is '{sampler}'"):
        MDLMPredictor(max_steps=4, max_new_tokens=4, tokenizer=TOK, sampler=sampler, confidence=confidence,
                      remdm_eta=0.1)


def test_a_rows_time_is_when_it_finished_not_its_forward_passes(monkeypatch):
    """Every ReMDM row finishes at the last step, however few forward passes it ran: its
    ``time_taken`` is the clock there (each clock reading here is one more second)."""
    clock = iter(range(1000))
    monkeypatch.setattr("xdllm.predict.engine.time.perf_counter", lambda: float(next(clock)))
    out, _ = _run(40, rows=6)
    assert max(out["steps_taken"]) < 40
    assert out["time_taken"] == [41.0] * 6  # read before each of the 41 loop steps, after the start


def test_one_host_sync_per_step_whether_or_not_a_row_runs_the_model():
    def syncs(steps: int) -> int:
        with count_host_syncs() as counts:
            out, _ = _run(steps, rows=8)
        assert max(out["steps_taken"]) < steps  # steps without a forward pass happened
        return sum(counts.values())

    assert syncs(40) - syncs(20) == 20
