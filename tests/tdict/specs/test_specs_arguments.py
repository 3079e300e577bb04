"""Spec constructors refuse meaningless arguments with errors naming the argument, what was expected and what came."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tdict.specs import Binary, Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot, Unbounded


@pytest.mark.parametrize(
    "make, err, match",
    [
        (lambda: Categorical(-1), ValueError, r"Categorical: n must be an int >= 1, got -1"),
        (lambda: Categorical(0), ValueError, r"Categorical: n must be an int >= 1, got 0"),
        (lambda: Categorical(2.5), TypeError, r"Categorical: n must be an int >= 1, got 2.5"),
        (lambda: Categorical(True), TypeError, r"Categorical: n must be an int >= 1, got True"),
        (lambda: OneHot(-2), ValueError, r"OneHot: n must be an int >= 1, got -2"),
        (lambda: Binary(-1), ValueError, r"Binary: n must be an int >= 1, got -1"),
        (lambda: MultiCategorical([3, -1]), ValueError, r"MultiCategorical: nvec must hold ints >= 1, got \[3, -1\]"),
        (lambda: MultiOneHot([2, 0]), ValueError, r"MultiOneHot: each nvec entry must be an int >= 1, got 0"),
        (lambda: Unbounded(shape=(-1,)), ValueError, r"Unbounded: shape must hold sizes >= 0, got \(-1,\)"),
        (lambda: Unbounded(shape=(2, -3)), ValueError, r"Unbounded: shape must hold sizes >= 0, got \(2, -3\)"),
        (lambda: Categorical(3, shape=(-1,)), ValueError, r"Categorical: shape must hold sizes >= 0, got \(-1,\)"),
        (lambda: Bounded(0.0, 1.0, shape=(-1,)), ValueError, r"Bounded: shape must hold sizes >= 0, got \(-1,\)"),
        (lambda: Composite(shape=(-1,)), ValueError, r"Composite: shape must hold sizes >= 0, got \(-1,\)"),
        (lambda: Unbounded(shape="ab"), TypeError, r"Unbounded: shape must be a sequence of ints, got 'ab'"),
        (
            lambda: Bounded(low=math.nan, high=1.0, shape=()),
            ValueError,
            r"Bounded: low must be a number .* got NaN in low=nan",
        ),
        (
            lambda: Bounded(low=0.0, high=torch.tensor([1.0, math.nan])),
            ValueError,
            r"Bounded: high must be a number .*got NaN in high=\[1.0, nan\]",
        ),
    ],
)
def test_bad_constructor_arguments(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_valid_arguments_still_accepted():
    assert Categorical(np.int64(3)).n == 3 and Categorical(torch.tensor(4)).n == 4
    assert Unbounded(shape=(0, 2)).shape == torch.Size([0, 2])  # empty dims are fine
    box = Bounded(-math.inf, math.inf, shape=(2,))  # infinite bounds mean "no bound"
    assert box.is_in(torch.tensor([-1e30, 1e30]))
    assert MultiCategorical([2, 3]).nvec.tolist() == [2, 3] and MultiOneHot([2, 3]).shape == torch.Size([5])
