"""``model.compile=true``: the network compiled once per shape bucket, with the logits and
gradients of the eager network. Compilations are counted with dynamo's compile counter
backend (it runs the traced graphs eagerly); one slow test runs the real inductor."""

import jaxtyping
import pytest
import torch
from torch._dynamo.testing import CompileCounter

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig
from xdllm.nn import transformer as transformer_module
from xdllm.nn.buckets import bucket_shape

VOCAB = 29


@pytest.fixture(autouse=True)
def no_shape_checks_while_tracing(monkeypatch):
    """The suite's jaxtyping + beartype wrappers cannot check dynamo's traced tensors: they are
    switched off here (they do not exist outside the tests)."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)


@pytest.fixture
def compile_counter(monkeypatch):
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(transformer_module._run_block, backend=counter, dynamic=False)
    monkeypatch.setattr(transformer_module, "_compiled_block", lambda: compiled)
    yield counter
    torch._dynamo.reset()


def make_model(compile: bool, attn_backend: str = "sdpa", n_layers: int = 2) -> RotaryTransformer:
    torch.manual_seed(0)
    return RotaryTransformer(RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=n_layers, n_heads=4,
                                                     max_positions=64, attn_backend=attn_backend, compile=compile))


def padded_batch(rows: int, width: int) -> dict:
    generator = torch.Generator().manual_seed(rows * 100 + width)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    real = torch.arange(width)[None] < lengths[:, None]
    return dict(input_ids=torch.randint(0, VOCAB, (rows, width), generator=generator), attention_mask=real)


def test_compiled_network_gives_the_eager_logits_and_gradients(compile_counter):
    eager, compiled = make_model(False), make_model(True)
    for rows, width in ((1, 5), (3, 21), (4, 40)):
        batch = padded_batch(rows, width)
        expected, got = eager(**batch, output_hidden_states=[1]), compiled(**batch, output_hidden_states=[1])
        torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(got.hidden_states[0], expected.hidden_states[0], atol=1e-5, rtol=0)
        real = batch["attention_mask"][..., None]
        (expected.logits * real).square().sum().backward()
        (got.logits * real).square().sum().backward()
        for (name, parameter), twin in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-5, rtol=1e-4, msg=name)
            parameter.grad, twin.grad = None, None
    assert compile_counter.frame_count >= 1


@pytest.mark.parametrize("attn_backend, rows, widths, compilations", [
    ("sdpa", (1, 2, 3), (3, 9, 17, 30), 3 * 2),  # rows 1, 2, 4; widths 16, 32
    ("flex", (3, 4), (9, 17, 30), 1 * 2),  # flex traced with the rest of the network
])
def test_the_compiled_network_compiles_once_per_bucket(compile_counter, attn_backend, rows, widths, compilations):
    model, eager, buckets = make_model(True, attn_backend).eval(), make_model(False, "sdpa").eval(), set()
    with torch.no_grad():
        for row_count in rows:
            for width in widths:
                buckets.add(bucket_shape(row_count, width))
                batch = padded_batch(row_count, width)
                torch.testing.assert_close(model(**batch), eager(**batch), atol=1e-5, rtol=0)
    assert compile_counter.frame_count == len(buckets) == compilations


@pytest.mark.parametrize("attn_backend", ["sdpa", "flex"])
def test_one_compiled_graph_serves_every_block_whatever_the_depth(compile_counter, attn_backend):
    """The blocks share one compiled graph: a network three times as deep compiles no more and
    no larger a graph (compiling the whole stack unrolled every block into it), and each block
    still runs its own weights (the logits are the eager network's)."""
    batch = padded_batch(3, 21)
    graphs = {}
    for n_layers in (1, 3):
        torch._dynamo.reset()
        compile_counter.clear()
        model, eager = make_model(True, attn_backend, n_layers).eval(), make_model(False, "sdpa", n_layers).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(**batch), eager(**batch), atol=1e-5, rtol=0)
        graphs[n_layers] = (compile_counter.frame_count, compile_counter.op_count)
    assert graphs[3] == graphs[1] and graphs[1][0] == 1, graphs


def test_compile_must_be_a_flag():
    with pytest.raises(ValueError, match="compile must be true or false"):
        RotaryTransformerConfig(vocab_size=VOCAB, compile="yes")


@pytest.mark.parametrize("family", ["mlm", "mdlm", "arlm", "bd3lm", "udlm", "hybrid"])
def test_every_family_trains_the_same_with_model_compile(family, compile_counter, tmp_path):
    """Two training steps from the CLI with ``model.compile=true`` (traced graphs run by the
    counter backend) leave the weights of the same two eager steps; the network was compiled."""
    from tiny_run import TINY_RUN

    from xdllm.cli.main import main
    from xdllm.run.checkpoint import load_trained

    weights = {}
    for compile in (False, True):
        run_dir = tmp_path / f"compile-{compile}"
        assert main(["train", *TINY_RUN, f"model={family}", "task=sort", "model.d_model=16", "model.n_layers=1",
                     "model.n_heads=2", f"model.compile={str(compile).lower()}", "trainer.max_steps=2",
                     "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
        network = load_trained(run_dir).model
        assert getattr(network, "transformer", network).config.compile is compile
        weights[compile] = network.state_dict()
    assert compile_counter.frame_count >= 1
    for name, eager in weights[False].items():
        torch.testing.assert_close(weights[True][name], eager, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_inductor_compiled_network_trains_like_the_eager_one():
    """The real compiler on the CPU (about a minute): forward and backward agree."""
    torch._dynamo.reset()
    eager, compiled = make_model(False), make_model(True)
    batch = padded_batch(3, 21)
    real = batch["attention_mask"][..., None]
    expected, got = eager(**batch), compiled(**batch)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    (expected * real).square().sum().backward()
    (got * real).square().sum().backward()
    for parameter, twin in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-4, rtol=1e-4)
