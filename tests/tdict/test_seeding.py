"""tdict.seeding: the convention (seed + i per stream, set_seed returns seed + k), argument errors,
generators that leave the global state alone, and the global generators (seed_everything, rng_state)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tdict.seeding import (
    chain_seeds,
    check_rng_state,
    check_seed,
    make_generator,
    next_seed,
    rng_state,
    seed_everything,
    set_rng_state,
    stream_seeds,
    use_generator,
)
from tdict.specs import Bounded, Categorical, Composite, MultiOneHot, OneHot, Unbounded
from tdict.validation import ArgumentTypeError


# ----------------------------------------------------------------------------- the convention
def test_streams_and_next_seed():
    assert stream_seeds(10, 3) == [10, 11, 12] and next_seed(10, 3) == 13
    assert next_seed(10) == 11 and next_seed(10, streams=0) == 10 and stream_seeds(5, 0) == []
    assert next_seed(-3, 2) == -1 and next_seed(np.int64(4)) == 5  # any integer


class _Part:
    def __init__(self, streams):
        self.streams = streams

    def set_seed(self, seed):
        self.seeds = None if seed is None else stream_seeds(seed, self.streams)
        return None if seed is None else next_seed(seed, self.streams)


def test_chaining_equals_offsetting_by_index_for_one_stream_parts():
    parts = [_Part(1) for _ in range(4)]
    assert chain_seeds(7, [p.set_seed for p in parts]) == 11
    assert [p.seeds for p in parts] == [[7 + i] for i in range(4)]  # worker i gets seed + i


def test_chaining_gives_every_stream_a_distinct_seed():
    parts = [_Part(2), _Part(0), _Part(3)]
    assert chain_seeds(0, [p.set_seed for p in parts]) == 5
    assert [p.seeds for p in parts] == [[0, 1], [], [2, 3, 4]]


def test_chaining_none_seeds_randomly():
    parts = [_Part(1), _Part(2)]
    assert chain_seeds(None, [p.set_seed for p in parts]) is None
    assert [p.seeds for p in parts] == [None, None]


def test_chain_refuses_a_part_that_returns_no_seed():
    with pytest.raises(
        ArgumentTypeError, match=r"chain_seeds: the seed returned by .*<lambda> for seed 3 must be an int"
    ):
        chain_seeds(3, [lambda s: None])


@pytest.mark.parametrize("bad", [1.5, True, "3", None, torch.tensor(3.0)])
def test_seed_errors_name_the_argument_and_what_arrived(bad):
    with pytest.raises(TypeError, match=r"next_seed: seed must be an int, got") as info:
        next_seed(bad)
    assert repr(bad)[:20] in str(info.value)
    assert isinstance(info.value, ValueError)  # ArgumentTypeError is both
    with pytest.raises(TypeError, match="seed_everything: seed must be an int, got"):
        seed_everything(bad)


def test_other_argument_errors():
    with pytest.raises(ValueError, match="next_seed: streams must be a non-negative int, got -1"):
        next_seed(0, -1)
    with pytest.raises(TypeError, match="stream_seeds: n must be a non-negative int, got 2.0"):
        stream_seeds(0, 2.0)
    with pytest.raises(TypeError, match=r"Env.set_seed: seed must be an int or None, got 'a'"):
        check_seed("Env.set_seed", "a", allow_none=True)
    assert check_seed("Env.set_seed", None, allow_none=True) is None
    with pytest.raises(TypeError, match="PendulumEnv: seed must be an int or None, got 0.5"):
        make_generator(0.5, owner="PendulumEnv")


# ----------------------------------------------------------------------------- generators
def test_make_generator_is_seeded_and_leaves_the_global_state_alone():
    state = torch.get_rng_state()
    a, b, c = make_generator(3), make_generator(3), make_generator(4)
    assert torch.equal(torch.get_rng_state(), state)
    x, y, z = (torch.rand(4, generator=g) for g in (a, b, c))
    assert torch.equal(x, y) and not torch.equal(x, z)
    # torch's own seeding: the same stream as torch.manual_seed(3), negative seeds as torch takes them
    assert torch.equal(x, torch.rand(4, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(torch.rand(2, generator=make_generator(-1)), torch.rand(2, generator=make_generator(2**64 - 1)))
    make_generator(2**70)  # any int


def test_make_generator_none_draws_its_seed_from_the_global_generator():
    torch.manual_seed(0)
    a = torch.rand(3, generator=make_generator(None))
    b = torch.rand(3, generator=make_generator(None))
    torch.manual_seed(0)
    assert not torch.equal(a, b)  # distinct generators
    assert torch.equal(torch.rand(3, generator=make_generator(None)), a)  # reproducible after seeding the program


def test_use_generator_redirects_global_draws_and_restores():
    torch.manual_seed(1)
    before = torch.get_rng_state()
    g = make_generator(0)
    with use_generator(g):
        first = torch.randn(3)
    with use_generator(g):  # the generator's stream goes on
        second = torch.randn(3)
    ref = make_generator(0)
    assert torch.equal(first, torch.randn(3, generator=ref)) and torch.equal(second, torch.randn(3, generator=ref))
    assert torch.equal(torch.get_rng_state(), before)
    with use_generator(None):  # no-op
        torch.rand(1)
    assert not torch.equal(torch.get_rng_state(), before)


def test_use_generator_restores_on_error_and_nests():
    before = torch.get_rng_state()
    outer, inner = make_generator(0), make_generator(1)
    with pytest.raises(RuntimeError, match="boom"):
        with use_generator(outer):
            torch.rand(1)
            raise RuntimeError("boom")
    assert torch.equal(torch.get_rng_state(), before)
    with use_generator(outer):
        with use_generator(inner):
            a = torch.rand(2)
        b = torch.rand(2)
    assert torch.equal(a, torch.rand(2, generator=make_generator(1)))
    ref = make_generator(0)
    torch.rand(1, generator=ref)  # the outer stream advanced by the draw before the error
    assert torch.equal(b, torch.rand(2, generator=ref))


@pytest.mark.parametrize(
    "spec",
    [
        Bounded(-1.0, 1.0, shape=(3,)),
        Bounded(0, 4, shape=(2,), dtype=torch.int64),
        Bounded(torch.tensor([-1.0, -float("inf")]), torch.tensor([1.0, 0.0]), shape=(2,)),
        Unbounded(shape=(2,)),
        Categorical(4, mask=torch.tensor([True, False, True, True])),
        OneHot(3),
        MultiOneHot([2, 3]),
        Composite(a=Unbounded(shape=(1,)), b=Composite(c=Categorical(3))),
    ],
    ids=lambda s: type(s).__name__,
)
def test_specs_draw_from_a_generator(spec):
    state = torch.get_rng_state()
    a, b = spec.rand((5,), generator=make_generator(2)), spec.rand((5,), generator=make_generator(2))
    assert torch.get_rng_state().equal(state)  # the global generator is not used
    assert (a == b).all() and spec.is_in(a)
    c = spec.rand((5,), generator=make_generator(3))
    assert not (a == c).all()


# ----------------------------------------------------------------------------- the global generators
def test_seed_everything_seeds_torch_numpy_and_random():
    seed_everything(5)
    a = (torch.rand(2), np.random.rand(), random.random())
    seed_everything(5)
    b = (torch.rand(2), np.random.rand(), random.random())
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]
    seed_everything(-1)  # negative seeds too (NumPy's modulo 2**32)
    seed_everything(2**40)


def test_rng_state_round_trip(tmp_path):
    seed_everything(0)
    state = rng_state()
    expected = (torch.rand(3), np.random.rand(2), random.random())
    torch.save(state, tmp_path / "rng.pt")
    seed_everything(1)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))  # plain data
    got = (torch.rand(3), np.random.rand(2), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_check_rng_state_names_what_is_wrong():
    check_rng_state(rng_state())
    with pytest.raises(ValueError, match=r"Trainer.load_state_dict: state\['rng'\] must come from rng_state\(\)"):
        check_rng_state({"torch": torch.zeros(1)}, owner="Trainer.load_state_dict", name="state['rng']")
    with pytest.raises(ValueError, match=r"set_rng_state: state must come from rng_state\(\).*got 3"):
        set_rng_state(3)
