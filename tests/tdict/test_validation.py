"""tdict.validation: the argument checks every package shares."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tdict.validation import (
    ArgumentTypeError,
    check_int,
    check_non_negative,
    check_non_negative_int,
    check_one_of,
    check_positive,
    check_positive_int,
    check_unit_interval,
)


def test_the_type_error_is_also_a_value_error():
    with pytest.raises(TypeError):
        check_positive_int("Owner", "n", "3")
    with pytest.raises(ValueError):
        check_positive_int("Owner", "n", "3")


@pytest.mark.parametrize(
    "check, value, error, message",
    [
        (check_positive_int, 0, ValueError, "Owner: n must be a positive int, got 0."),
        (check_positive_int, True, ArgumentTypeError, "Owner: n must be a positive int, got True."),
        (check_positive_int, 2.0, ArgumentTypeError, "Owner: n must be a positive int, got 2.0."),
        (check_positive_int, None, ArgumentTypeError, "Owner: n must be a positive int, got None."),
        (check_non_negative_int, -1, ValueError, "Owner: n must be a non-negative int, got -1."),
        (check_non_negative_int, False, ArgumentTypeError, "Owner: n must be a non-negative int, got False."),
        (check_positive, 0.0, ValueError, "Owner: n must be a number > 0, got 0.0."),
        (check_positive, True, ArgumentTypeError, "Owner: n must be a number > 0, got True."),
        (check_positive, math.nan, ValueError, "Owner: n must be a number > 0, got nan."),
        (check_non_negative, -0.5, ValueError, "Owner: n must be a number >= 0, got -0.5."),
        (check_non_negative, "1", ArgumentTypeError, "Owner: n must be a number >= 0, got '1'."),
        (check_unit_interval, 1.5, ValueError, "Owner: n must be in [0, 1], got 1.5."),
        (check_unit_interval, -0.1, ValueError, "Owner: n must be in [0, 1], got -0.1."),
        (check_unit_interval, True, ArgumentTypeError, "Owner: n must be in [0, 1], got True."),
        (check_unit_interval, math.nan, ValueError, "Owner: n must be in [0, 1], got nan."),
    ],
)
def test_refusals_name_owner_argument_expectation_and_value(check, value, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        check("Owner", "n", value)


def test_accepted_values_come_back():
    assert check_positive_int("O", "n", 3) == 3
    assert type(check_positive_int("O", "n", np.int64(3))) is int  # numpy ints become Python ints
    assert check_non_negative_int("O", "n", 0) == 0
    assert check_int("O", "n", -5) == -5
    assert check_int("O", "n", 2, minimum=2) == 2
    assert check_positive("O", "x", 1e-9) == 1e-9
    assert check_positive("O", "x", math.inf) == math.inf
    assert check_non_negative("O", "x", 0) == 0
    assert check_unit_interval("O", "p", 0) == 0 and check_unit_interval("O", "p", 1.0) == 1.0
    assert check_one_of("O", "mode", "a", ("a", "b")) == "a"


def test_none_only_when_allowed():
    for check in (check_positive_int, check_non_negative_int, check_positive, check_non_negative):
        assert check("O", "x", None, allow_none=True) is None
    with pytest.raises(ValueError, match=r"^O: x must be a positive int or None, got 0\.$"):
        check_positive_int("O", "x", 0, allow_none=True)
    with pytest.raises(ValueError, match=r"^O: x must be a number > 0 or None, got -1\.$"):
        check_positive("O", "x", -1, allow_none=True)


def test_general_minimum_and_finiteness():
    with pytest.raises(ValueError, match=r"^Tree: arity must be an int >= 2, got 1\.$"):
        check_int("Tree", "arity", 1, minimum=2)
    with pytest.raises(ValueError, match=r"^S: eps must be a finite number >= 0, got inf\.$"):
        check_non_negative("S", "eps", math.inf, finite=True)
    with pytest.raises(ValueError, match=r"^S: t must be a finite number > 0, got inf\.$"):
        check_positive("S", "t", math.inf, finite=True)


def test_one_of_lists_the_choices():
    with pytest.raises(ValueError, match=r"^L: reduction must be one of \['mean', 'sum'\], got 'max'\.$"):
        check_one_of("L", "reduction", "max", ("mean", "sum"))
    with pytest.raises(ValueError, match="must be one of"):
        check_one_of("L", "reduction", ["mean"], {"mean", "sum"})  # unhashable: refused, not a TypeError


def test_long_values_are_shortened_in_the_message():
    with pytest.raises(ArgumentTypeError) as info:
        check_positive_int("O", "n", "x" * 1000)
    assert len(str(info.value)) < 200 and str(info.value).endswith("....")


@given(st.integers())
def test_positive_int_accepts_exactly_the_ints_from_one(value):
    if value >= 1:
        assert check_positive_int("O", "n", value) == value
    else:
        with pytest.raises(ValueError, match=rf"^O: n must be a positive int, got {value}\.$"):
            check_positive_int("O", "n", value)


@given(st.integers(), st.integers(min_value=-5, max_value=5))
def test_check_int_agrees_with_the_minimum(value, minimum):
    if value >= minimum:
        assert check_int("O", "n", value, minimum=minimum) == value
    else:
        with pytest.raises(ValueError, match="^O: n must be "):
            check_int("O", "n", value, minimum=minimum)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_number_checks_agree_with_the_comparisons(value):
    for check, accepted in (
        (check_positive, value > 0),
        (check_non_negative, value >= 0),
        (check_unit_interval, 0 <= value <= 1),
    ):
        if accepted:
            assert check("O", "x", value) == value
        else:
            with pytest.raises(ValueError, match=r"^O: x must be "):
                check("O", "x", value)


@given(st.booleans())
def test_a_bool_is_never_a_number(value):
    for check in (check_int, check_positive_int, check_non_negative_int, check_positive, check_non_negative):
        with pytest.raises(ArgumentTypeError):
            check("O", "flag", value)
    with pytest.raises(ArgumentTypeError):
        check_unit_interval("O", "flag", value)
