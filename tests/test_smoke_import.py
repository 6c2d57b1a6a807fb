from xdllm.diffusion.seeding import sample_seed


def test_sample_seed_depends_on_every_part():
    base = sample_seed(1, 2, 3)
    assert base != sample_seed(0, 2, 3)
    assert base != sample_seed(1, 3, 3)
    assert base != sample_seed(1, 2, 4)
    assert base == sample_seed(1, 2, 3)
