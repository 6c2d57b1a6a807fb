"""The positions a block-aligned generation needs, as the hybrid and udlm predictors report them
(what `xdllm train` checks before training), agree with what their decoding uses."""

import pytest
from hybrid_helpers import tiny_hybrid
from udlm_helpers import LetterTokenizer, prompt_batch, tiny_udlm

from xdllm_models.hybrid.predictor import HybridPredictor
from xdllm_models.udlm.predictor import UDLMPredictor

PROMPT = [[4, 5]]  # bos + 2 tokens: the answer starts at position 4 with blocks of 4


@pytest.mark.parametrize("predictor_class, network", [(HybridPredictor, tiny_hybrid), (UDLMPredictor, tiny_udlm)])
def test_positions_needed_is_exactly_what_decoding_fits_in(predictor_class, network):
    tokenizer = LetterTokenizer()
    predictor = predictor_class(5, 4, tokenizer=tokenizer)  # 5 new tokens: two blocks of 4
    needed = predictor.positions_needed(3)
    assert needed == 4 + 8
    predictor.predict(prompt_batch(tokenizer, PROMPT), model=network(tokenizer.vocab_size, max_positions=needed))
    with pytest.raises(ValueError, match="reaches position 11, beyond the model's max_positions=11"):
        predictor.predict(prompt_batch(tokenizer, PROMPT),
                          model=network(tokenizer.vocab_size, max_positions=needed - 1))
