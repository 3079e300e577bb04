"""InteractionType and the set_interaction_type switch."""

import pytest

from tdict.nn import InteractionType, interaction_type, set_interaction_type


def test_members_and_lookup():
    assert [m.value for m in InteractionType] == ["mode", "median", "mean", "random", "deterministic"]
    assert InteractionType("MEAN") is InteractionType.MEAN
    assert InteractionType.from_str("Random") is InteractionType.RANDOM
    assert str(InteractionType.MODE) == "mode" and InteractionType.MODE == "mode"


def test_context_manager_restores_nested_and_on_error():
    assert interaction_type() is None
    with set_interaction_type(InteractionType.MODE):
        assert interaction_type() is InteractionType.MODE
        with set_interaction_type("random"):
            assert interaction_type() is InteractionType.RANDOM
        assert interaction_type() is InteractionType.MODE
        with pytest.raises(ZeroDivisionError):
            with set_interaction_type(None):
                assert interaction_type() is None
                1 / 0
        assert interaction_type() is InteractionType.MODE
    assert interaction_type() is None
    with set_interaction_type():
        assert interaction_type() is InteractionType.DETERMINISTIC
    assert interaction_type() is None


def test_decorator_restores_on_error_and_is_reentrant():
    switch = set_interaction_type("median")

    @switch
    def inner(fail=False):
        if fail:
            raise ValueError("boom")
        return interaction_type()

    @switch
    def outer():
        return inner(), interaction_type()

    assert inner() is InteractionType.MEDIAN
    assert outer() == (InteractionType.MEDIAN, InteractionType.MEDIAN)
    with pytest.raises(ValueError, match="boom"):
        inner(fail=True)
    assert interaction_type() is None


def test_bad_type_raises_at_construction():
    with pytest.raises(ValueError, match="'sideways'"):
        set_interaction_type("sideways")
    with pytest.raises(ValueError):
        set_interaction_type(3)
    assert interaction_type() is None
