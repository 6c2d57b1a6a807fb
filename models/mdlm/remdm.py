"""ReMDM: MDLM sampling that may mask revealed tokens again (Wang et al., 2025, "Remasking
Discrete Diffusion Models with Inference-Time Scaling").

MDLM's ancestral sampler never revisits a token: once revealed it is final. ReMDM's reverse step
from time ``t`` to ``s < t`` (``alpha(t) = 1 - m(t) / m(1)``, the share of tokens unmasked at
``t`` under the noise schedule ``m``) keeps the forward process's marginals but lets a revealed
token become a mask again with probability ``sigma``:

- a revealed (generated) token is masked again with probability ``sigma``;
- a mask is revealed with probability ``(alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t)``, its
  token drawn from the model's distribution;

both decided on the same canvas, from one forward pass. ``sigma = 0`` is MDLM's ancestral step.
``sigma`` must stay at most ``(1 - alpha_s) / alpha_t`` (``sigma_max``, capped at 1) for the
masks' share to be a probability; the schedules choose it:

- ``cap``: ``min(eta, sigma_max)``;
- ``rescale``: ``eta * sigma_max``;
- ``conf``: ``sigma_max`` shared among each row's revealed tokens by a softmax of minus the
  probability each had when it was revealed (the least likely are masked again first); masks are
  revealed as in MDLM;
- ``loop``: the time profile itself changes: ``alpha`` rises linearly to ``alpha_on`` by time
  ``t_on``, stays there until ``t_off`` while every step masks revealed tokens again with
  ``sigma = min(eta, sigma_max)`` (and reveals as many masks on average), then rises linearly to 1 by time 0;
  the noise schedule is not used. (The reference code switches ``alpha`` at the boundary steps;
  here ``alpha`` is continuous and a step that crosses a boundary is an MDLM step.)

Every schedule reaches ``sigma = 0`` and ``alpha = 1`` at the last step, so every mask is
filled after exactly ``max_steps`` steps. The draws need no logits, only the tokens revealed
do: a step that reveals nothing in a row needs no forward pass for it (the predictor skips
it, as MDLM's ancestral sampler skips its empty steps). The draws come from the
per-sample streams (:mod:`xdllm.predict.streams`), so a sample's result does not depend on its
batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.diffusion.schedules import NoiseSchedule
from xdllm.predict import streams

SCHEDULES = ("cap", "rescale", "conf", "loop")
DEFAULT_ETA = 0.02
DEFAULT_LOOP = {"t_on": 0.55, "t_off": 0.05, "alpha_on": 0.9}  # the paper's OpenWebText setting


@dataclass(frozen=True)
class RemaskingSchedule:
    """How much of the revealed text a ReMDM step masks again (see the module docstring)."""

    name: str = "cap"
    eta: float = DEFAULT_ETA
    t_on: float = DEFAULT_LOOP["t_on"]
    t_off: float = DEFAULT_LOOP["t_off"]
    alpha_on: float = DEFAULT_LOOP["alpha_on"]

    @classmethod
    def from_options(cls, schedule: str | None, eta: float | None, t_on: float | None,
                     t_off: float | None, alpha_on: float | None, where: str) -> RemaskingSchedule:
        """The schedule the predictor options name (None: the defaults), refusing what does not
        apply: ``eta`` with ``conf``, the loop's times with any other schedule."""
        name = schedule or "cap"
        if name not in SCHEDULES:
            raise ValueError(f"{where}: remdm_schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if eta is not None and name == "conf":
            raise ValueError(f"{where}: remdm_schedule='conf' sets how much to mask again from the tokens' "
                             f"probabilities; remdm_eta={eta!r} does not apply (set it to null)")
        if eta is not None and not 0.0 <= eta <= 1.0:
            raise ValueError(f"{where}: remdm_eta is a probability, in [0, 1]; got {eta!r}")
        loop = {"t_on": t_on, "t_off": t_off, "alpha_on": alpha_on}
        given = [key for key, value in loop.items() if value is not None]
        if given and name != "loop":
            raise ValueError(f"{where}: remdm_{given[0]}={loop[given[0]]!r} sets the time profile of "
                             f"remdm_schedule='loop'; the schedule is {name!r} (set it to null)")
        times = {key: DEFAULT_LOOP[key] if value is None else value for key, value in loop.items()}
        if not 0.0 < times["t_off"] < times["t_on"] < 1.0:
            raise ValueError(f"{where}: the loop needs 0 < remdm_t_off < remdm_t_on < 1; got "
                             f"remdm_t_off={times['t_off']!r}, remdm_t_on={times['t_on']!r}")
        if not 0.0 < times["alpha_on"] < 1.0:
            raise ValueError(f"{where}: remdm_alpha_on is the share of tokens revealed during the loop, in "
                             f"(0, 1); got {times['alpha_on']!r}")
        return cls(name=name, eta=DEFAULT_ETA if eta is None else float(eta),
                   **{key: float(value) for key, value in times.items()})

    def unmasked_shares(self, steps: int, noise_schedule: NoiseSchedule | None) -> list[float]:
        """``alpha(t)``, the share of tokens revealed at time ``t``, at the ``steps + 1`` times
        ``t = 1 - k / steps`` of a run (0 at ``t = 1``, 1 at ``t = 0``); computed once per run."""
        times = [1.0 - k / steps for k in range(steps + 1)]
        if self.name == "loop":
            shares = [self._loop_share(t) for t in times]
        elif noise_schedule is None:
            raise ValueError(f"remdm_schedule={self.name!r} follows a noise schedule; none was given")
        else:
            masked = noise_schedule.mask_prob(torch.tensor(times, dtype=torch.float64))
            shares = (1.0 - masked / masked[0]).tolist()
        shares[-1] = 1.0
        return shares

    def _loop_share(self, t: float) -> float:
        if t >= self.t_on:
            return self.alpha_on * (1.0 - t) / (1.0 - self.t_on)
        if t >= self.t_off:
            return self.alpha_on
        return 1.0 - (1.0 - self.alpha_on) * t / self.t_off

    def remask_share(self, alpha_t: float, alpha_s: float) -> float:
        """``sigma`` of a step from ``alpha_t`` to ``alpha_s`` (for ``conf``: ``sigma_max``, which
        the step shares among the revealed tokens)."""
        sigma_max = 1.0 if alpha_t == 0.0 else min(1.0, (1.0 - alpha_s) / alpha_t)
        if self.name == "loop":
            return min(self.eta, sigma_max) if alpha_s == alpha_t else 0.0
        if self.name == "cap":
            return min(self.eta, sigma_max)
        if self.name == "rescale":
            return self.eta * sigma_max
        return sigma_max


@dataclass(frozen=True)
class RemdmStep:
    """One ReMDM step's writes: the new window, the masks revealed (``revealed``), the tokens
    masked again (``remasked``) and each position's probability when it was revealed."""

    window: Integer[Tensor, "rows width"]
    revealed: Bool[Tensor, "rows width"]
    remasked: Bool[Tensor, "rows width"]
    written_probs: Float[Tensor, "rows width"]


def remdm_step(schedule: RemaskingSchedule, shares: Sequence[float], step: int,
               window_ids: Integer[Tensor, "rows width"], tokens: Integer[Tensor, "rows width"],
               token_probs: Float[Tensor, "rows width"], written_probs: Float[Tensor, "rows width"],
               writable: Bool[Tensor, "rows width"], keys: Integer[Tensor, " rows"], mask_token_id: int
               ) -> RemdmStep:
    """Step ``step`` of a run (from time ``1 - step/steps`` to ``1 - (step+1)/steps``; ``shares``:
    the run's :meth:`RemaskingSchedule.unmasked_shares`) on the output windows. ``tokens``: each
    position's drawn token, ``token_probs`` its probability; ``written_probs``: what each revealed
    token's probability was when it was revealed; ``writable``: the generated positions (a
    prompt's tokens are never masked). Nothing is read on the host."""
    alpha_t, alpha_s = shares[step], shares[step + 1]
    sigma = schedule.remask_share(alpha_t, alpha_s)
    masked = writable & (window_ids == mask_token_id)
    shown = writable & ~masked
    if schedule.name == "conf":
        weights = torch.where(shown, -written_probs, float("-inf")).softmax(dim=1).nan_to_num(0.0)
        remask_prob, sigma_masked = sigma * weights, 0.0
    else:
        remask_prob, sigma_masked = sigma, sigma
    reveal_prob = 1.0 if alpha_s >= 1.0 else (alpha_s - (1.0 - sigma_masked) * alpha_t) / (1.0 - alpha_t)
    width = window_ids.shape[1]
    revealed = masked & (streams.uniforms(keys, step, streams.Purpose.REVEAL, width) < reveal_prob)
    remasked = shown & (streams.uniforms(keys, step, streams.Purpose.REMASK, width) < remask_prob)
    window = torch.where(revealed, tokens, torch.where(remasked, mask_token_id, window_ids))
    return RemdmStep(window=window, revealed=revealed, remasked=remasked,
                     written_probs=torch.where(revealed, token_probs, written_probs))
