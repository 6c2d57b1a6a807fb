"""What a model-family package registers: its name, description, configs and frozen models.

Apart from :mod:`xdllm.interfaces` (which re-exports it) so that discovering the families, as
``xdllm --help`` does to list their config groups, does not load torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ModelFamily:
    """What a model package registers under the ``xdllm.models`` entry-point group.

    ``config_dir`` is joined to Hydra's search path, so the package's ``model/<name>.yaml``
    (and any experiments it ships) become selectable from the command line.
    ``frozen_models``: the frozen models the family's runs need, as ``frozen.<name>`` -> the
    family whose checkpoint to give (a drafter needs its ``arlm`` target, say); the family
    contract tests train a tiny run of that family first and pass it.
    """

    name: str
    description: str
    config_dir: Path
    frozen_models: Mapping[str, str] = field(default_factory=dict, hash=False)
