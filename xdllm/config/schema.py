"""What every configuration value may be, checked right after composition, before anything runs.

Three layers:

- **The root configs' own keys** (``SCHEMAS``): a type, and a range or a set of choices, per key.
  A wrong value is one error naming the key, the value and what is allowed.
- **New keys** (``+key=value``) are accepted only where a group takes extras: ``trainer`` (any
  Lightning Trainer argument), ``frozen`` (named models) and the family's component nodes, whose
  constructors decide. Elsewhere a new key is a typo, and is refused with the known keys named.
- **Family component nodes** (``model``, ``loss``, ``predictor``, ``evaluator``, ``collator.*``):
  every key must be a parameter of the ``_target_``'s signature, with a value of its annotated
  type (ints, floats, bools, strings, their optional forms and literals):
  :mod:`xdllm.config.components`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xdllm.errors import XdllmError
from xdllm.train.optim_config import SCHEDULES


@dataclass(frozen=True)
class Rule:
    """Allowed values of one key: types, inclusive ``low``/``high`` or exclusive ``above``/``below``
    bounds, or ``choices``; ``nullable`` admits null."""

    types: tuple[type, ...]
    low: int | float | None = None
    above: int | float | None = None
    high: int | float | None = None
    below: int | float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False

    def describe(self) -> str:
        if self.choices is not None:
            allowed = " or ".join(str(choice) for choice in self.choices)
        else:
            allowed = " or ".join(TYPE_WORDS.get(t, "a number" if t is float else t.__name__)
                                  for t in self.types if not (t is int and float in self.types))
            bounds = [f"{sign} {bound:g}" for sign, bound in
                      ((">=", self.low), (">", self.above), ("<=", self.high), ("<", self.below)) if bound is not None]
            if bounds:
                allowed += " " + " and ".join(bounds)
        return allowed + (" (or null)" if self.nullable else "")

    def allows(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) and bool not in self.types:
            return False
        if not isinstance(value, self.types):
            return False
        if self.choices is not None:
            return value in self.choices
        if self.low is not None and value < self.low:
            return False
        if self.above is not None and value <= self.above:
            return False
        if self.below is not None and value >= self.below:
            return False
        return self.high is None or value <= self.high


TYPE_WORDS = {int: "a whole number", str: "a string", bool: "true or false", list: "a list"}

WHOLE, POSITIVE, COUNT = Rule((int,), low=0), Rule((int,), low=1), Rule((int,), low=0)
NUMBER = (float, int)
FLAG = Rule((bool,))

SCHEMAS: dict[str, dict[str, Rule]] = {
    "train": {
        "seed": WHOLE,
        "torch_threads": Rule((int,), low=1, nullable=True),
        "run_dir": Rule((str,), nullable=True),
        "existing_run_dir": Rule((str,), choices=("refuse", "move_aside")),
        "tokenizer": Rule((str,)),
        "init_from": Rule((str,), nullable=True),
        "generate_after_train": FLAG,
        "text_samples_after_train": COUNT,
        "text_samples_temperature": Rule(NUMBER, low=0, nullable=True),
        "progress": Rule((str,), choices=("auto", "bar", "lines")),
        "trainer.log_every_n_steps": POSITIVE,  # before progress_every_n_steps, which defaults to it
        "progress_every_n_steps": POSITIVE,
        "trainer.max_steps": POSITIVE,
        "trainer.val_check_interval": POSITIVE,
        "trainer.devices": Rule((int, str, list)),
        "trainer.accelerator": Rule((str,), choices=("cpu", "gpu", "cuda", "auto")),
        "trainer.precision": Rule((str, int)),
        "trainer.enable_progress_bar": FLAG,
        "trainer.enable_model_summary": FLAG,
        "data.batch_size": POSITIVE,
        "data.eval_batch_size": POSITIVE,
        "data.num_val_samples": POSITIVE,
        "data.num_test_samples": COUNT,
        "data.num_workers": COUNT,
        "data.validation_roles": Rule((list,), nullable=True),
        "optim.lr": Rule(NUMBER, above=0),
        "optim.weight_decay": Rule(NUMBER, low=0),
        "optim.beta1": Rule(NUMBER, low=0, high=0.999999),
        "optim.beta2": Rule(NUMBER, low=0, high=0.999999),
        "optim.eps": Rule(NUMBER, above=0),
        "optim.warmup_steps": COUNT,
        "optim.min_lr_ratio": Rule(NUMBER, low=0, high=1),
        "optim.schedule": Rule((str,), choices=SCHEDULES),
        "optim.decay_fraction": Rule(NUMBER, above=0, high=1),
        "optim.gradient_clip_val": Rule(NUMBER, low=0, nullable=True),
        "optim.accumulate_grad_batches": POSITIVE,
        "optim.fused": Rule((bool,), nullable=True),
        "optim.ema_decay": Rule(NUMBER, low=0, below=1, nullable=True),
        "checkpoint.last_every_n_steps": POSITIVE,
        "checkpoint.save_every_n_steps": Rule((int,), low=1, nullable=True),
        "checkpoint.monitor": Rule((str,), nullable=True),
        "checkpoint.mode": Rule((str,), choices=("max", "min"), nullable=True),
        "early_stopping.patience": Rule((int,), low=1, nullable=True),
        "early_stopping.min_delta": Rule(NUMBER, low=0),
        "early_stopping.stop_at": Rule(NUMBER, nullable=True),
        "early_stopping.min_steps": COUNT,
        "history.num_samples": COUNT,
        "history.k": POSITIVE,
        "judge": Rule((str,), nullable=True),
        "validation_choices": Rule((str,), nullable=True),
    },
    "generate": {
        "ckpt": Rule((str,), nullable=True),  # null: not given (required, checked when it runs)
        "device": Rule((str,)),  # its choices are checked when it runs
        "split": Rule((str,), choices=("test", "validation")),
        "prompts_file": Rule((str,), nullable=True),
        "data_path": Rule((str,), nullable=True),
        "num_samples": Rule((int,), low=1, nullable=True),
        "batch_size": POSITIVE,
        "output_dir": Rule((str,), nullable=True),
        "history": Rule((str,), choices=("topk",), nullable=True),
        "history_k": POSITIVE,
        "history_tensorboard_samples": COUNT,
        "live": FLAG,
        "ema": FLAG,
        "judge": Rule((str,), nullable=True),
        "choice_records": Rule((str,), nullable=True),
    },
}

OPEN_NODES = {"train": ("trainer", "frozen", "model", "collator", "loss", "predictor", "evaluator"),
              "generate": ("predictor", "evaluator", "frozen")}
"""Where ``+key=value`` may add a key: the nodes whose consumer takes arbitrary arguments."""

COMPONENT_NODES = ("model", "loss", "predictor", "evaluator", "collator.train", "collator.val",
                   "collator.prediction")


def override_key(override: str) -> str:
    """The config key a Hydra override names: ``a.b`` for ``a.b=1``, ``+a.b=1``, ``++a.b=1`` and ``~a.b``."""
    return override.partition("=")[0].lstrip("+~")


def check_new_keys(overrides: Sequence[str], config_name: str) -> None:
    """Refuse ``+key=value`` outside the nodes that take extras, naming what exists there."""
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override_key(override)
        if key.split(".")[0] not in OPEN_NODES.get(config_name, ()):
            raise XdllmError(unknown_key_message(key, config_name, f" in {override!r}"))


GENERATE_OWN_OPTIONS = ("; generate sets what it generates with its own options: num_samples= (how many "
                        "samples), batch_size= (prompts per predictor call), split=")


def did_you_mean(name: str, names: Sequence[str], prefix: str, cutoff: float = 0.75) -> str:
    """`` (did you mean <prefix><closest>?)`` for the name in ``names`` closest to a mistyped
    ``name``, or nothing when none is close."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=cutoff)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def keys_elsewhere(name: str, keys: Sequence[str], close: bool = True) -> str:
    """`` (did you mean optim.lr?)`` for the dotted ``keys`` named ``name`` (or, where none is and
    ``close``, a name close to it), the three nearest the top; nothing when none is."""
    leaves = {key: key.rpartition(".")[2] for key in keys}
    named = [key for key, leaf in leaves.items() if leaf == name]
    if not named and close:
        nearest = difflib.get_close_matches(name, sorted(set(leaves.values())), n=1, cutoff=0.8)
        named = [key for key, leaf in leaves.items() if leaf in nearest]
    named = sorted(named, key=lambda key: (key.count("."), key))[:3]
    return f" (did you mean {' or '.join(named)}?)" if named else ""


def unknown_key_message(key: str, config_name: str, where_given: str = "", present: Sequence[str] = (),
                        refused_by: str | None = None, elsewhere: Sequence[str] = ()) -> str:
    """A key the config does not have, a close match (a typo's fix) there or else a key of that
    name at another node (``elsewhere``: dotted keys, ``lr`` for ``optim.lr``), the keys known
    there (the schema's and ``present``: those the composed config has at the key's node), and
    what to give instead: ``+key=value`` where its node takes new keys, unless the node's component
    (``refused_by``, its ``_target_``) takes no such argument (and, for ``generate``'s ``data.*``,
    generate's own options)."""
    open_nodes = OPEN_NODES.get(config_name, ())
    top = key.split(".")[0]
    node, _, leaf = key.rpartition(".")
    prefix = f"{node}." if node else ""
    known = sorted({k[len(prefix):].split(".")[0] for k in SCHEMAS.get(config_name, {}) if k.startswith(prefix)}
                   | set(() if node else open_nodes) | {k for k in present if not k.startswith("_")})
    other_nodes = [other for other in elsewhere if other.rpartition(".")[0] != node]
    every_key = sorted(set(SCHEMAS.get(config_name, {})) | set(elsewhere))
    meant = (did_you_mean(key, every_key, "", cutoff=0.85) or keys_elsewhere(leaf, other_nodes, close=False)
             or did_you_mean(leaf, known, prefix) or keys_elsewhere(leaf, other_nodes))
    # the whole key mistyped (history_k for history.k), else the same name elsewhere, else a typo here
    # or one elsewhere
    unknown = f"unknown key {key!r}{where_given}{meant}"
    hint = f"; known keys there: {', '.join(known)}" if known else ""
    if top in open_nodes and refused_by is not None:
        return f"{unknown}: {node} does not list it{hint}; {refused_by} takes no argument {leaf!r}"
    if top in open_nodes:
        return f"{unknown}: {node} does not list it{hint}; {top} takes new keys: add one with +{key}=VALUE"
    where = f"{node} has" if node else "the config has"
    own = GENERATE_OWN_OPTIONS if config_name == "generate" and top == "data" else ""
    return f"{unknown}: {where} no such key and takes no new ones{hint}{own}"


NODE_HINTS = {"history": "; history.num_samples=0 records no validation history"}
ABSENT = object()


def _check_groups_of_options(config: DictConfig, config_name: str) -> None:
    """A group of options given one value is refused, naming its options: the schema's groups
    (``history=null``, ``data=3``: each key's rule would have reported a ``None`` never given) and
    the components (``loss=3``, ``predictor=null``; a training run's family options, ``mlm``),
    each built from its options (a traceback, or a run that failed at its first validation). A
    family may leave its ``evaluator`` out or null, and leave out any component."""
    keys = SCHEMAS.get(config_name, {})
    groups = dict.fromkeys(key.rpartition(".")[0] for key in keys if "." in key)
    components = (("collator", *COMPONENT_NODES, str(config.get("model_family"))) if config_name == "train"
                  else ("predictor", "evaluator"))  # generate's: merged over the run's
    for node in (*groups, *components):
        value = OmegaConf.select(config, node, default=ABSENT, throw_on_missing=False)
        if OmegaConf.is_config(value) or (node in components and value is ABSENT):
            continue
        if (config_name, node, value) == ("train", "evaluator", None):
            continue
        shown = "xdllm generate --cfg ckpt=<run>" if config_name == "generate" else "xdllm train --cfg"
        options = ", ".join(f"{key}=..." for key in keys if key.startswith(f"{node}.")) or \
            f"{node}.NAME=VALUE; {shown} shows them"
        value = None if value is ABSENT else value
        raise XdllmError(f"{node}={value!r} is not allowed: {node} is a group of options, not a value: set them one "
                         f"by one ({options}){NODE_HINTS.get(node, '')}")


def check_values(config: DictConfig, config_name: str) -> None:
    """Every key of the root schema against its rule."""
    _check_groups_of_options(config, config_name)
    for key, rule in SCHEMAS.get(config_name, {}).items():
        value = OmegaConf.select(config, key, throw_on_missing=False)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        if not rule.allows(value):
            quote = _quote_hint(key, value) if rule.types == (str,) else ""
            raise XdllmError(f"{key}={value!r} is not allowed: {key} must be {rule.describe()}{quote}")
    if "frozen" in config:
        _check_frozen(config.frozen)
    roles = OmegaConf.select(config, "data.validation_roles", throw_on_missing=False)
    if roles is not None and (not roles or len(set(roles)) != len(roles)
                              or not set(roles) <= {"loss", "prediction"}):
        raise XdllmError(f"data.validation_roles={list(roles)} is not allowed: it must list loss and/or "
                         "prediction, each once")


def _quote_hint(key: str, value: Any) -> str:
    """For a string option Hydra read as a number or true/false: how to give it as a string."""
    if not isinstance(value, (int, float, bool)):
        return ""
    return (f"; Hydra read the value as {'true/false' if isinstance(value, bool) else 'a number'}: for a string, "
            f"quote it as typed, e.g. {key}='{str(value).lower() if isinstance(value, bool) else value}'")


def _check_frozen(frozen: Any) -> None:
    """``frozen``: names mapped to checkpoint files or run directories (null: none)."""
    if frozen is None:
        return
    if not isinstance(frozen, DictConfig):
        raise XdllmError(f"frozen={frozen!r} is not allowed: frozen maps names to run directories or checkpoints, "
                         "one per name: frozen.NAME=<path> (+frozen.NAME=<path> for a name it has not)")
    for name in frozen:
        value = OmegaConf.select(frozen, str(name), throw_on_missing=False)
        if not isinstance(value, str) and value is not None:
            shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            raise XdllmError(f"frozen.{name}={shown!r} is not allowed: frozen.{name} must be a string (a run "
                             f"directory or checkpoint){_quote_hint(f'frozen.{name}', value)}")
