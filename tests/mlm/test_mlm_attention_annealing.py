"""``mlm.attention_annealing_steps``: the MLM family's training collators (prompt/answer and
packed) name the annealed share of later keys for the first N steps and the MLM loss trains
under that rule, packed rows as padded ones."""

import pytest
import torch
from causal_rule import UnderCausalRule
from test_packed_collator import EXAMPLES, TOKENIZER, make_examples, make_model
from tiny_run import TINY, TINY_RUN

from xdllm.cli.main import main
from xdllm.collate.attention_annealing import annealed_attention
from xdllm.nn import AnnealedCausalMask
from xdllm_models.mlm.collator import DefaultMLMCollator, MLMSeq2SeqTrainCollator
from xdllm_models.mlm.loss import MLMLoss
from xdllm_models.mlm.packed_collator import PackedMLMCollator

COLLATORS = [MLMSeq2SeqTrainCollator, DefaultMLMCollator, lambda tok, **kw: PackedMLMCollator(tok, 24, **kw)]


@pytest.mark.parametrize("collator", COLLATORS)
def test_the_collators_name_the_share_of_later_keys_until_the_last_annealed_step(collator):
    annealing = collator(TOKENIZER, attention_annealing_steps=8)
    early, late = annealing(make_examples([(3, 9), (2, 4)], step=0)), annealing(make_examples([(3, 9)], step=6))
    done = annealing(make_examples([(3, 9)], step=8))
    assert float(early["attention_visible"]) == 0.0 and float(late["attention_visible"]) == 0.75
    assert int(late["attention_salt"]) == 6 and isinstance(annealed_attention(late), AnnealedCausalMask)
    assert "attention_visible" not in done and "attention_visible" not in collator(TOKENIZER)(EXAMPLES)
    torch.testing.assert_close(late["input_ids"], collator(TOKENIZER)(make_examples([(3, 9)], step=6))["input_ids"])


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_the_loss_trains_under_the_annealed_rule_packed_as_padded(chunk_size):
    model = make_model()
    examples = make_examples([(3, 9), (0, 14), (5, 2), (2, 11)], step=0)
    loss = MLMLoss(TOKENIZER.mask_token_id, chunk_size=chunk_size)
    padded = MLMSeq2SeqTrainCollator(TOKENIZER, seed=7, attention_annealing_steps=8)(examples)
    packed = PackedMLMCollator(TOKENIZER, 24, seed=7, attention_annealing_steps=8)(examples)
    plain = {key: value for key, value in padded.items() if key not in ("attention_visible", "attention_salt")}

    with torch.no_grad():
        annealed = loss(model, padded)["loss"]
        torch.testing.assert_close(annealed, loss(UnderCausalRule(model), plain)["loss"])  # step 0 of 8: causal
        torch.testing.assert_close(loss(model, packed)["loss"], annealed, atol=1e-5, rtol=0)
        assert not torch.allclose(annealed, loss(model, plain)["loss"])  # bidirectional differs


def test_training_with_annealing_runs_and_a_bad_value_is_one_line(tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=4",
                 "mlm.attention_annealing_steps=3", f"run_dir={tmp_path / 'run'}"]) == 0
    capsys.readouterr()
    assert main(["train", *TINY_RUN, "collator=packed_mlm", "mlm.attention_annealing_steps=abc",
                 f"run_dir={tmp_path / 'bad'}"]) == 2
    error = capsys.readouterr().err
    assert "mlm.attention_annealing_steps='abc' is not allowed" in error and error.count("\n") == 1
