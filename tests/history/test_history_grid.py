"""Grid pictures: fill order and confidence of each cell of a grid-shaped answer (sudoku)."""

import pytest
from history_fakes import fake_generate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard
from xdllm.history.format import HistoryError
from xdllm.history.grid import GridFigure, fill_order

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


@pytest.fixture(scope="module")
def history_file(tmp_path_factory):
    """Two samples, a 2x3 output region, two commits per step: 3 steps."""
    directory = tmp_path_factory.mktemp("grid")
    recorder = HistoryTopKPlugin(k=2, output_dir=directory, tokenizer=TOKENIZER)
    fake_generate(recorder, prompt_lens=[6, 6], gen_len=6, commits_per_step=[2, 2], seed=5)
    return next(directory.glob("history-*.pt"))


def test_fill_order_ranks_commit_steps(history_file):
    sample = load_history(history_file).sample(0)
    order = fill_order(sample, 6)
    assert sorted(order.tolist()) == [1, 1, 2, 2, 3, 3]
    for cell in range(6):  # the rank of a cell is the rank of its commit step
        assert order[cell] == sorted(set(sample.commit_step.tolist())).index(int(sample.commit_step[cell])) + 1


def test_grid_figure_draws_both_panels_and_refuses_a_short_region(history_file, tmp_path):
    sample = load_history(history_file).sample(1)
    figure = GridFigure(sample, (2, 3))
    titles = [axes.get_title() for axes in figure.figure.axes]
    assert "fill order (1 = committed first)" in titles and "confidence at commit (0 to 1)" in titles
    labels = {axes.get_label() for axes in figure.figure.axes}
    assert "<colorbar>" in labels  # both colour bars are drawn
    cell_texts = [text.get_text() for text in figure.figure.axes[0].texts]
    final = [sample.token(t) for t in sample.canvas[-1].tolist()]
    assert all(token in cell_texts for token in final)
    figure.save_png(tmp_path / "grid.png")
    assert (tmp_path / "grid.png").stat().st_size > 1000
    assert figure.figure.get_suptitle().startswith("sample 1: 2x3 grid after 3 steps")
    with pytest.raises(ValueError, match="cannot be read as a 3x3 grid"):
        GridFigure(sample, (3, 3))


def test_a_grid_smaller_than_the_output_says_which_positions_it_draws(history_file):
    figure = GridFigure(load_history(history_file).sample(0), (2, 2))
    assert figure.figure.get_suptitle().startswith("sample 0: 2x2 grid of the first 4 of 6 output positions after")
    assert len(figure.figure.axes[0].texts) == 4 + 4  # a token and an order label per drawn cell


def test_tensorboard_writes_grid_tags_and_pngs(history_file, tmp_path):
    logdir = tmp_path / "tb"
    write_tensorboard([history_file], logdir, tokenizer=TOKENIZER, grid=(2, 3))
    events = EventAccumulator(str(logdir))
    events.Reload()
    grids = [tag for tag in events.Tags()["images"] if tag.endswith("/grid")]
    assert len(grids) == 2
    assert len(list(history_file.parent.glob("*.grid.png"))) == 2
    with pytest.raises(HistoryError, match="cannot be read as a 4x4 grid"):
        write_tensorboard([history_file], tmp_path / "tb2", grid=(4, 4))
    with pytest.raises(HistoryError, match="grid must be"):
        write_tensorboard([history_file], tmp_path / "tb3", grid=(0, 3))
