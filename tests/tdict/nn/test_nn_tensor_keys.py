"""tdict.nn.TensorKeysMixin: the one ``set_keys`` / ``tensor_keys`` implementation."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from tdict.nn import TensorKeys, TensorKeysMixin


class Owner(TensorKeysMixin):
    default_keys = {"reward": "reward", "done": ("next", "done"), "mask": None, "log_prob": "action_log_prob"}
    deprecated_key_names = {"old_reward": "reward"}
    accepts_key_lists = ("log_prob",)

    def __init__(self):
        self.seen = []

    def _on_keys_set(self, changed):
        self.seen.append(changed)


class Module(TensorKeysMixin, nn.Module):
    default_keys = {"x": "x"}
    accepts_key_lists = True


def test_defaults_and_attribute_access():
    owner = Owner()
    assert owner.tensor_keys.reward == "reward"
    assert owner.tensor_keys.done == ("next", "done")
    assert owner.tensor_keys.mask is None
    assert vars(owner.tensor_keys) == {
        "reward": "reward",
        "done": ("next", "done"),
        "mask": None,
        "log_prob": "action_log_prob",
    }
    with pytest.raises(AttributeError, match=r"no key named 'rewards'; the key names are \['done', "):
        owner.tensor_keys.rewards


def test_each_instance_has_its_own_keys():
    a, b = Owner(), Owner()
    a.set_keys(reward="r")
    assert a.tensor_keys.reward == "r" and b.tensor_keys.reward == "reward"


def test_set_keys_normalises_returns_self_and_calls_the_hook():
    owner = Owner()
    assert owner.set_keys(reward=("r",), done=("next", ("my", "done"))) is owner
    assert owner.tensor_keys.reward == "r"
    assert owner.tensor_keys.done == ("next", "my", "done")
    assert owner.seen == [{"reward": "r", "done": ("next", "my", "done")}]


def test_unknown_names_are_listed_and_nothing_changes():
    owner = Owner()
    with pytest.raises(ValueError, match=r"Owner.set_keys: unknown key name\(s\) \['bogus'\]; accepted: \["):
        owner.set_keys(reward="r", bogus="x")
    assert owner.tensor_keys.reward == "reward" and owner.seen == []
    with pytest.raises(KeyError):  # also a KeyError (TorchRL's value estimators raise that one)
        owner.set_keys(bogus="x")


@pytest.mark.parametrize("bad", [3, None, (), ("a", 1), ["a"], b"a"])
def test_values_must_be_keys(bad):
    owner = Owner()
    with pytest.raises(ValueError, match=r"Owner.set_keys: got reward=.*; reward must be a str or a tuple of str\.$"):
        owner.set_keys(done="d", reward=bad)
    assert owner.tensor_keys.done == ("next", "done") and owner.seen == []  # checked before any change


def test_lists_only_where_accepted():
    owner = Owner().set_keys(log_prob=["a", ("b", "c")])
    assert owner.tensor_keys.log_prob == ["a", ("b", "c")]
    with pytest.raises(ValueError, match=r"log_prob=\[\]; log_prob must be .* or a non-empty list of keys"):
        owner.set_keys(log_prob=[])
    assert Module().set_keys(x=["a", "b"]).tensor_keys.x == ["a", "b"]


def test_none_only_where_the_default_is_none():
    owner = Owner().set_keys(mask="m")
    assert owner.set_keys(mask=None).tensor_keys.mask is None
    with pytest.raises(ValueError, match=r"mask must be a str or a tuple of str, or None \(off\)"):
        owner.set_keys(mask=3)


def test_deprecated_names_warn_and_apply():
    owner = Owner()
    with pytest.warns(DeprecationWarning, match="'old_reward' is deprecated, use 'reward'"):
        owner.set_keys(old_reward="r")
    assert owner.tensor_keys.reward == "r"
    with pytest.raises(ValueError, match="got both 'old_reward' and 'reward'"):
        owner.set_keys(old_reward="r", reward="q")


def test_tensor_keys_are_read_only():
    owner = Owner()
    with pytest.raises(AttributeError, match=r"change 'reward' with set_keys\(reward=...\)"):
        owner.tensor_keys.reward = "r"
    with pytest.raises(AttributeError):
        del owner.tensor_keys.reward


def test_a_bad_default_is_reported_as_such():
    class Bad(TensorKeysMixin):
        default_keys = {"reward": 3}

    with pytest.raises(ValueError, match=r"Bad.default_keys: got reward=3"):
        Bad().tensor_keys


def test_modules_copy_and_pickle_their_keys():
    module = Module().set_keys(x=("a", "b"))
    for clone in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert clone.tensor_keys == module.tensor_keys and clone.tensor_keys is not module.tensor_keys
    assert "x" not in dict(module.state_dict())  # keys are not state
    assert TensorKeys({"x": "a"}) != TensorKeys({"x": "b"})
    assert repr(TensorKeys({"x": ("a", "b")})) == "TensorKeys(x=('a', 'b'))"


def test_compiled_reads():
    module = Module().set_keys(x="obs")

    def read(td):
        return td[module.tensor_keys.x] + 1

    compiled = torch.compile(read, fullgraph=True, backend="eager")
    assert compiled({"obs": torch.zeros(2)}).tolist() == [1.0, 1.0]


def test_keys_declared_as_a_dataclass():
    """TorchRL's form: the keys are the fields of ``_AcceptedKeys`` (or of ``default_keys`` itself)."""
    import dataclasses

    class Declared(TensorKeysMixin):
        @dataclasses.dataclass
        class _AcceptedKeys:
            reward: str = "reward"
            done: tuple = ("next", "done")
            priority: str = None  # off by default
            extra: list = dataclasses.field(default_factory=lambda: "made")

    assert Declared.default_keys == {"reward": "reward", "done": ("next", "done"), "priority": None, "extra": "made"}
    owner = Declared().set_keys(reward="r", priority="p")
    assert (owner.tensor_keys.reward, owner.tensor_keys.priority, owner.tensor_keys.done) == (
        "r",
        "p",
        ("next", "done"),
    )
    with pytest.raises(KeyError, match="unknown key name"):
        owner.set_keys(other="x")

    @dataclasses.dataclass
    class Keys:
        value: str = "state_value"

    class AsDefaultKeys(TensorKeysMixin):
        default_keys = Keys

    class Inheriting(AsDefaultKeys):  # a subclass keeps its parent's keys
        pass

    assert AsDefaultKeys.default_keys == {"value": "state_value"}
    assert Inheriting().tensor_keys.value == "state_value"
