"""The packing benchmarks' document lengths: long-tailed, clipped, a quarter of a row on average."""

from xdllm.data.benchmark_lengths import long_tailed_lengths


def test_lengths_are_clipped_seeded_and_average_a_quarter_row():
    lengths = long_tailed_lengths(2000, 512, sigma=1.0, seed=3)
    assert min(lengths) >= 8 and max(lengths) == 512  # the tail reaches the row length
    assert abs(sum(lengths) / len(lengths) - 128) < 1.0
    assert lengths == long_tailed_lengths(2000, 512, sigma=1.0, seed=3)
    assert lengths != long_tailed_lengths(2000, 512, sigma=1.0, seed=4)
