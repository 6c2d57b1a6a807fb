"""Load the autoregressive run that judges a generation (``judge=<run directory or checkpoint>``).

The judge is its network and weights (its moving average where it has one), in eval mode without
gradients; like a frozen model, its task and data are not built, so a judge trained on a text
file loads after that file moved. It must be an ``arlm`` run with the generating run's
vocabulary: the same token at every id, the same special ids.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xdllm.data.tokenizer import load_tokenizer
from xdllm.errors import XdllmError
from xdllm.evaluate.generative_perplexity import GenerativeJudge
from xdllm.interfaces import Tokenizer
from xdllm.run.build import RunComponents, instantiate_component, position_overflow
from xdllm.run.free_text import is_free_text
from xdllm.run.frozen_models import frozen_network
from xdllm.run.run_checkpoint import read_run_checkpoint
from xdllm.run.stored_tokenizer import stored_tokenizer

JUDGE_FAMILY = "arlm"

log = logging.getLogger(__name__)


def load_judge(path: str | Path, tokenizer: Tokenizer, map_location: str = "cpu") -> GenerativeJudge:
    """The judge ``path`` names, checked to be autoregressive and to share ``tokenizer``'s vocabulary."""
    if not str(path).strip():
        raise XdllmError("judge= is empty: give the run directory or checkpoint of an arlm run, or leave judge out")
    try:
        checkpoint = read_run_checkpoint(path, map_location)
    except XdllmError as error:
        raise XdllmError(f"judge={path}: {error}") from error
    family = checkpoint.config.get("model_family")
    if family != JUDGE_FAMILY:
        raise XdllmError(f"judge={path}: {checkpoint.path} is a run of the {family} family; the judge scores text "
                         f"left to right, so it must be an autoregressive run (model={JUDGE_FAMILY}, e.g. xdllm train "
                         "experiment=text_arlm) trained with the same tokenizer")
    judge_tokenizer = stored_tokenizer(checkpoint.content, checkpoint.config, checkpoint.path)
    if judge_tokenizer is None:
        judge_tokenizer = load_tokenizer(checkpoint.config.tokenizer)
    check_same_vocabulary(tokenizer, judge_tokenizer, f"judge={path}")
    model = frozen_network(checkpoint, "judge")
    rotary = getattr(model, "rotary", None)
    return GenerativeJudge(model, tokenizer, checkpoint.path, getattr(rotary, "max_positions", None))


def check_same_vocabulary(tokenizer: Tokenizer, judge_tokenizer: Tokenizer, where: str) -> None:
    """Refuse a judge whose vocabulary differs from the generating run's, naming the first
    difference. The id -> token map and the special ids, not the tokenizers' ``fingerprint``: the
    judge reads the generated ids and never encodes text, so a normalizer or merge rule it does
    not share changes nothing it scores."""
    for name in ("vocab_size", "pad_token_id", "mask_token_id", "bos_token_id", "eos_token_id"):
        ours, theirs = getattr(tokenizer, name), getattr(judge_tokenizer, name)
        if ours != theirs:
            raise XdllmError(f"{where}: the judge's tokenizer has {name} {theirs}, the generating run's {ours}; the "
                             "judge must be trained with the same tokenizer (tokenizer=<the same file>)")
    for token_id in range(tokenizer.vocab_size):
        ours, theirs = tokenizer.id_to_token(token_id), judge_tokenizer.id_to_token(token_id)
        if ours != theirs:
            raise XdllmError(f"{where}: token id {token_id} is {ours!r} for the generating run but {theirs!r} for "
                             "the judge; the judge must be trained with the same tokenizer (tokenizer=<the same file>)")


def judge_for_generation(path: str | Path, tokenizer: Tokenizer, predictor: Any, longest_prompt: int,
                         new_tokens: int, loaded: dict[str, GenerativeJudge] | None = None) -> GenerativeJudge:
    """The judge of a generation by ``predictor`` whose prompts are at most ``longest_prompt``
    tokens (bos included) and whose outputs at most ``new_tokens`` (as the predictor places them:
    whole blocks, for a block-wise one): refused before anything is generated when they may not
    fit its positions. ``loaded``: judges loaded already, by path (a sweep's generations share
    one)."""
    judge = (loaded or {}).get(str(path)) or load_judge(path, tokenizer)
    if loaded is not None:
        loaded[str(path)] = judge
    overflow = position_overflow(judge.model, predictor, longest_prompt, new_tokens)
    if overflow is not None:
        placed = f" ({overflow.placed})" if overflow.placed else ""
        raise XdllmError(f"judge={path}: the longest prompt ({longest_prompt} tokens with bos) plus "
                         f"predictor.max_new_tokens={new_tokens} needs up to {overflow.needed} positions{placed}; the "
                         f"judge has max_positions={overflow.limit}: lower predictor.max_new_tokens or judge with a "
                         "run that has more positions")
    return judge


def validation_judging(config: DictConfig, components: RunComponents) -> tuple[GenerativeJudge | None, Any]:
    """The judge of a training run's validation generations (``config.judge``; None without
    one), and the predictor validation generates with: the run's own, except on free text with a
    judge, where it samples at ``text_samples_temperature`` (greedy decoding of empty prompts
    writes one text)."""
    if config.get("judge") is None:
        return None, components.predictor
    if "prediction" not in config.data.validation_roles:
        log.warning("judge=%s scores generated texts, but data.validation_roles=%s generates none during training: "
                    "only the generation after training is judged; data.validation_roles=[loss,prediction] judges "
                    "every validation", config.judge, list(config.data.validation_roles))
    predictor = components.predictor
    temperature = config.get("text_samples_temperature")
    if is_free_text(components.task) and temperature is not None:
        predictor = instantiate_component(OmegaConf.merge(config.predictor, {"temperature": temperature}),
                                          "predictor", tokenizer=components.tokenizer)
    new_tokens = getattr(predictor, "max_new_tokens", None) or int(config.derived.max_new_tokens)
    judge = judge_for_generation(config.judge, components.tokenizer, predictor, 1 + components.task.max_prompt_len,
                                 new_tokens)
    return judge, predictor
