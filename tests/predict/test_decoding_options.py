"""Every hand-written decoding predictor checks its shared options the same way, naming itself
(the flags' types are also enforced by beartype in tests, so they are checked on the function)."""

import pytest

from xdllm.predict.inputs import check_decoding_options
from xdllm_models.arlm.predictor import ARPredictor
from xdllm_models.dflash.predictor import SpeculativePredictor
from xdllm_models.hybrid.predictor import HybridPredictor
from xdllm_models.udlm.predictor import UDLMPredictor


@pytest.mark.parametrize("options, message", [
    ({"max_new_tokens": 0}, "max_new_tokens must be >= 1, got 0"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"flags": {"stop_at_eos": "yes"}}, "stop_at_eos must be true or false, got 'yes'"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
])
def test_each_bad_option_is_named_with_its_owner(options, message):
    arguments = {"max_new_tokens": 4, "flags": {}, **options}
    with pytest.raises(ValueError, match=f"^Owner: .*{message}"):
        check_decoding_options("Owner", **arguments)


@pytest.mark.parametrize("build, owner", [
    (lambda **o: ARPredictor(4, **o), "ARPredictor"),
    (lambda **o: HybridPredictor(4, 2, **o), "HybridPredictor"),
    (lambda **o: UDLMPredictor(4, 2, **o), "UDLMPredictor"),
    (lambda **o: SpeculativePredictor(4, **o), "SpeculativePredictor"),
])
def test_the_sampling_predictors_check_them(build, owner):
    with pytest.raises(ValueError, match=f"^{owner}: seed must be >= 0"):
        build(seed=-1)
    with pytest.raises(ValueError, match=f"^{owner}: .*top_k"):
        build(top_k=0)


def test_the_speculative_predictor_checks_them():
    with pytest.raises(ValueError, match="^SpeculativePredictor: max_new_tokens must be >= 1"):
        SpeculativePredictor(0)
