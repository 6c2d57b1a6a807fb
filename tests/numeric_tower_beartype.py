"""The type checker the tests run every annotated function of xdllm and xdllm_models under
(``--jaxtyping-packages`` in ``pyproject.toml``): beartype with PEP 484's implicit numeric tower,
so that an ``int`` passes where ``float`` is annotated, as it does when xdllm runs (``lr=0`` read
from a config is an int). It is named here because the jaxtyping plugin cannot parse a checker
given with arguments after two package names."""

from beartype import BeartypeConf, beartype

checker = beartype(conf=BeartypeConf(is_pep484_tower=True))
