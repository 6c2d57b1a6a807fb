"""``mdlm.attention_annealing_steps``: over the first N optimizer steps the training collator
names a share of later keys to attend (step / N) and the MDLM loss trains under that annealed
causal rule; validation batches and later steps attend bidirectionally."""

import pytest
import torch
from causal_rule import UnderCausalRule
from tiny_run import TINY_MLM, TINY_RUN

from xdllm.cli.main import main
from xdllm.collate.attention_annealing import annealed_attention
from xdllm.data import builtin_tokenizer
from xdllm.interfaces import Example
from xdllm.nn import AnnealedCausalMask
from xdllm.nn.factory import denoiser_transformer
from xdllm_models.mdlm.collator import MDLMCollator
from xdllm_models.mdlm.loss import MDLMLoss

TOK = builtin_tokenizer()


def _examples(step: int) -> list[Example]:
    pairs = [("3 1 2", "1 2 3"), ("9 8 7 6 5", "5 6 7 8 9"), ("4 4", "4 4")]
    return [Example(prompt_ids=TOK.encode(p), target_ids=TOK.encode(t), sample_index=i, step=step)
            for i, (p, t) in enumerate(pairs)]


def test_the_collator_names_the_share_of_later_keys_until_the_last_annealed_step():
    collator = MDLMCollator(TOK, attention_annealing_steps=8)
    early, late, done = collator(_examples(0)), collator(_examples(6)), collator(_examples(8))
    assert float(early["attention_visible"]) == 0.0 and float(late["attention_visible"]) == 0.75
    assert int(late["attention_salt"]) == 6
    assert "attention_visible" not in done and "attention_visible" not in MDLMCollator(TOK)(_examples(0))
    torch.testing.assert_close(late["input_ids"], MDLMCollator(TOK)(_examples(6))["input_ids"])  # nothing else
    rule = annealed_attention(late)
    assert isinstance(rule, AnnealedCausalMask) and annealed_attention(done) is None


@pytest.mark.parametrize("steps", [-1, True])
def test_a_bad_number_of_steps_is_refused(steps):
    with pytest.raises(ValueError, match="attention_annealing_steps must be a whole number >= 0"):
        MDLMCollator(TOK, attention_annealing_steps=steps)


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_the_loss_trains_under_the_annealed_rule(chunk_size):
    torch.manual_seed(0)
    model = denoiser_transformer(vocab_size=TOK.vocab_size, d_model=32, n_layers=2, n_heads=2, attn_backend="sdpa")
    causal_start = MDLMCollator(TOK, attention_annealing_steps=8)(_examples(0))
    plain = {key: value for key, value in causal_start.items() if not key.startswith("attention_")
             or key == "attention_mask"}
    loss = MDLMLoss(chunk_size=chunk_size)
    annealed = loss(model, causal_start)["loss"]
    bidirectional = loss(model, plain)["loss"]

    torch.testing.assert_close(annealed, loss(UnderCausalRule(model), plain)["loss"])  # step 0 of 8: causal
    assert not torch.allclose(annealed, bidirectional)


def test_training_with_annealing_runs_and_a_bad_value_is_one_line(tmp_path, capsys):
    assert main(["train", *TINY_RUN, "model=mdlm", *TINY_MLM, "trainer.max_steps=4", "trainer.val_check_interval=4",
                 "mdlm.attention_annealing_steps=3", f"run_dir={tmp_path / 'run'}"]) == 0
    capsys.readouterr()
    assert main(["train", *TINY_RUN, "model=mdlm", "mdlm.attention_annealing_steps=-2",
                 f"run_dir={tmp_path / 'bad'}"]) == 2
    error = capsys.readouterr().err
    assert "attention_annealing_steps must be a whole number >= 0, got -2" in error and error.count("\n") == 1
