"""Error contracts shared with tensordict: exception types (dual-base classes where both libraries'
types are fair) and the fixed phrases code written against tensordict searches for, next to our own
details (the key, what was expected, what arrived)."""

from __future__ import annotations

import functools
import os
import re

import pytest
import torch
from torch import distributions as D

from tdict import LazyStackedTensorDict, MemoryMappedTensor, TensorDict, lazy_stack, tensorclass
from tdict.errors import (
    LOCKED,
    BatchIndexError,
    DimError,
    InvalidArgumentError,
    KeyValueError,
    ShapeMismatchError,
    SymlinkError,
    batch_mismatch_error,
    locked_error,
)
from tdict.nn import (
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictSequential,
    dispatch,
    set_interaction_type,
)


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3)}}, batch_size=[3])


# ------------------------------------------------------------------------------------------ classes
@pytest.mark.parametrize(
    "cls, bases",
    [
        (ShapeMismatchError, (RuntimeError, ValueError)),
        (SymlinkError, (FileExistsError, RuntimeError)),
        (DimError, (IndexError, ValueError)),
        (InvalidArgumentError, (RuntimeError, ValueError)),
        (BatchIndexError, (IndexError, RuntimeError)),
        (KeyValueError, (KeyError, ValueError)),
    ],
)
def test_dual_base_classes(cls, bases):
    assert all(issubclass(cls, base) for base in bases)
    err = cls("message")
    for base in bases:
        with pytest.raises(base, match="message"):
            raise err


def test_helpers_word_their_messages():
    assert str(locked_error("cannot do x.")) == f"{LOCKED}: cannot do x."
    err = batch_mismatch_error("k", TensorDict({"leaf": torch.zeros(2)}, []), [3])
    assert isinstance(err, ShapeMismatchError)
    assert str(err) == (
        "Key 'k': batch dimension mismatch, nested collection of batch size [] does not start with the batch "
        "size [3] (the Tensor leaf has shape torch.Size([2]) which is incompatible with the batch-size "
        "torch.Size([3]))."
    )


# ------------------------------------------------------------------------------------------ locking
@pytest.mark.parametrize(
    "write, key",
    [
        (lambda td: td.set("new", torch.zeros(3)), "'new'"),
        (lambda td: td.set("a", torch.zeros(3, 4)), "'a'"),
        (lambda td: td.__delitem__("a"), "'a'"),
        (lambda td: td.update({"z": torch.zeros(3)}), "'z'"),
        (lambda td: td.set(("b", "new"), torch.zeros(3)), "'new'"),
    ],
)
def test_locked_writes_raise_the_fixed_phrase_and_name_the_key(write, key):
    td = _td().lock_()
    with pytest.raises(RuntimeError, match=rf"^{LOCKED}.*{key}"):
        write(td)
    assert set(td.keys()) == {"a", "b"}


def test_locked_set_suggests_set_():
    td = _td().lock_()
    with pytest.raises(RuntimeError, match=rf"{LOCKED}\. For in-place modification of key 'new' use set_\(\)"):
        td.set("new", torch.zeros(3))
    stack = lazy_stack([_td(), _td()]).lock_()
    with pytest.raises(RuntimeError, match=rf"{LOCKED}\. For in-place modification of key 'new'"):
        stack.set("new", torch.zeros(2, 3))


# ------------------------------------------------------------------------------------------ keys
def test_bool_of_a_collection():
    with pytest.raises(RuntimeError, match=r"Converting a tensordict to boolean value is not permitted.*\.all\(\)"):
        bool(_td())


def test_missing_key_lists_the_keys():
    with pytest.raises(KeyError, match=r"key 'zz' not found in TensorDict with keys \['a', 'b', \('b', 'c'\)\]"):
        _td().get("zz")


def test_pop_without_default():
    td = _td()
    with pytest.raises(KeyError, match=r"You are trying to pop key 'zz'.*without a default.*with keys \['a'"):
        td.pop("zz")
    assert td.pop("zz", None) is None
    assert td.pop("a").shape == (3, 4) and "a" not in td


def test_rename_key_safe():
    td = _td()
    with pytest.raises(KeyError, match=r"rename_key_: 'b' is already present in TensorDict.*safe=True"):
        td.rename_key_("a", "b", safe=True)
    assert "a" in td


def test_flatten_keys_collision():
    td = TensorDict({"a": {"b": torch.zeros(())}, "a.b": torch.ones(())}, [])
    with pytest.raises(
        KeyError,
        match=r"Flattening keys in tensordict causes keys to collide: 'a\.b' and an earlier entry both become 'a\.b'",
    ):
        td.flatten_keys(".")


# ------------------------------------------------------------------------------------------ shapes
def test_batch_size_setter_names_the_incompatible_tensor():
    td = TensorDict({"a": torch.zeros(3, 4, 5, 6)}, batch_size=[3])
    expected = re.escape(
        "Cannot set batch_size [3, 5]: the Tensor a has shape torch.Size([3, 4, 5, 6]) which is incompatible "
        "with the batch-size torch.Size([3, 5])."
    )
    for base in (RuntimeError, ValueError):
        with pytest.raises(base, match=expected):
            td.batch_size = [3, 5]
    assert td.batch_size == (3,)


def test_set_with_a_batch_mismatch():
    td = TensorDict({}, [3, 4])
    with pytest.raises(
        ShapeMismatchError,
        match=r"Key 'w': batch dimension mismatch, got self.batch_size=torch.Size\(\[3, 4\]\) and value.shape=torch.Size\(\[3\]\): the value of shape \[3\] does not start",
    ):
        td.set("w", torch.zeros(3))
    with pytest.raises(
        ValueError,
        match=re.escape("the Tensor smth has shape torch.Size([1]) which is incompatible with the batch-size"),
    ):
        td.set("z", TensorDict({"smth": torch.zeros(1)}, []))
    assert list(td.keys()) == []


def test_setitem_with_a_batch_mismatch():
    td = TensorDict({"a": torch.zeros(4, 5)}, [4])
    with pytest.raises(
        ShapeMismatchError,
        match=r"batch dimension mismatch, the indexed destination TensorDict batch size is \[2\], the value's is "
        r"\[3\]: key \('a',\) has shape \[3, 5\]",
    ):
        td[:2] = TensorDict({"a": torch.ones(3, 5)}, [3])
    assert (td["a"] == 0).all()
    # a feature-dim mismatch is not worded as a batch mismatch
    with pytest.raises(RuntimeError, match=r"^td\[index\] = value: key \('a',\) has shape \[2, 4\]"):
        td[:2] = TensorDict({"a": torch.ones(2, 4)}, [2])


def test_tensorclass_field_with_a_batch_mismatch():
    @tensorclass
    class Data:
        x: torch.Tensor
        z: TensorDict

    data = Data(x=torch.zeros(3, 4), z=TensorDict({}, [3, 4]), batch_size=[3, 4])
    with pytest.raises(ShapeMismatchError, match=r"Data\.x: batch dimension mismatch.*\[3, 4\].*\[4\]"):
        data.x = torch.zeros(4)
    with pytest.raises(RuntimeError, match=re.escape("the Tensor smth has shape torch.Size([1]) which")):
        data.z = TensorDict({"smth": torch.zeros(1)}, [])


def test_heterogeneous_stack_cannot_be_densified():
    stack = lazy_stack([TensorDict(x=torch.zeros(1)), TensorDict(x=torch.zeros(2))])
    with pytest.raises(
        RuntimeError, match=r"Failed to stack tensors within a tensordict: key 'x' .*shapes \[\(1,\), \(2,\)\]"
    ):
        stack.get("x")
    assert [t.shape for t in stack.get("x", as_list=True)] == [(1,), (2,)]


def test_split_arguments():
    with pytest.raises(IndexError, match=r"split: Incompatible dim 0 for a batch of 0 dims"):
        TensorDict({}, []).split(1, 0)
    td = TensorDict({}, [3, 2])
    with pytest.raises(IndexError, match=r"split: Incompatible dim 2 for a batch of 2 dims \(expected -2 <= dim < 2\)"):
        td.split(1, 2)
    with pytest.raises(TypeError, match="must be int or list of ints, got str"):
        td.split("1", 0)
    with pytest.raises(TypeError, match="must be int or list of ints"):
        td.split(["1", 2], 0)
    with pytest.raises(ShapeMismatchError, match="Insufficient number of elements in split_size"):
        td.split([], 0)
    with pytest.raises(ValueError, match=r"sizes \[1, 1\] sum to 2, but split expects split_size to sum exactly.*3"):
        td.split([1, 1], 0)
    assert [p.batch_size for p in td.split([1, 2], 0)] == [(1, 2), (2, 2)]
    stack = lazy_stack([td, td], 1)
    with pytest.raises(IndexError, match="Incompatible dim"):
        stack.split(1, 3)


def test_names_length():
    td = TensorDict({}, [3, 4])
    with pytest.raises(
        ValueError,
        match=r"the length of the dimension names must equate the tensordict batch_dims: expected 2 .* got 1",
    ):
        td.names = ["a"]


def test_refine_names_conflict():
    td = TensorDict({}, [3, 4], names=["a", "b"])
    with pytest.raises(RuntimeError, match=r"refine_names: cannot coerce TensorDict names.*dim 1 is already named 'b'"):
        td.refine_names("a", "c")


# ------------------------------------------------------------------------------------------ lazy stacks
def test_lazy_insert_and_cat():
    stack = lazy_stack([TensorDict({"a": torch.zeros(2)}, [2]) for _ in range(2)])
    with pytest.raises(TypeError, match="insert: Expected new value to be TensorDictBase instance.*got Tensor"):
        stack.insert(0, torch.zeros(2))
    with pytest.raises(TypeError, match="Expected new value to be TensorDictBase instance"):
        stack.append(torch.zeros(2))
    dense = TensorDict({"a": torch.zeros(3, 2)}, [3, 2])
    with pytest.raises(RuntimeError, match=r"needs the same number of stacked tensordicts, 2, in each"):
        torch.cat([stack, dense], dim=1)
    assert isinstance(stack, LazyStackedTensorDict) and len(stack.tensordicts) == 2


# ------------------------------------------------------------------------------------------ memmap
def test_memmap_to_another_prefix_needs_copy_existing(tmp_path):
    td = TensorDict({"a": torch.zeros(3)}, [3]).memmap_(tmp_path / "first")
    with pytest.raises(
        RuntimeError, match="A filename was provided but the tensor already has a file associated.*copy_existing"
    ):
        td.memmap_(tmp_path / "second")
    mt = MemoryMappedTensor.from_tensor(torch.zeros(2), filename=tmp_path / "x.memmap")
    with pytest.raises(RuntimeError, match="already has a file associated"):
        MemoryMappedTensor.from_tensor(mt, filename=tmp_path / "y.memmap")


def test_memmap_refuses_a_symlinked_sub_directory(tmp_path):
    prefix, outside = tmp_path / "saved", tmp_path / "outside"
    prefix.mkdir()
    outside.mkdir()
    (prefix / "nested").symlink_to(outside, target_is_directory=True)
    td = TensorDict({"nested": {"x": torch.randn(3)}, "y": torch.zeros(2)}, batch_size=[])
    with pytest.raises(SymlinkError, match=r"'.*nested' is a symbolic link .*TensorDict through symlink"):
        td.memmap(prefix)
    assert not list(outside.iterdir())
    assert sorted(os.listdir(prefix)) in (["nested"], [".tdict.lock", "nested"])
    # the prefix itself may be a link: the caller chose it
    link = tmp_path / "link"
    link.symlink_to(outside, target_is_directory=True)
    TensorDict({"nested": {"x": torch.randn(3)}}, []).memmap(link)
    assert list(outside.iterdir())


# ------------------------------------------------------------------------------------------ nn
def test_module_arguments():
    class NotAnInstance(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match=r"TensorDictModule: Module .* is not callable"):
        TensorDictModule(NotAnInstance, in_keys=["a"], out_keys=["b"])
    module = TensorDictModule(lambda a: (a, a + 1, a + 2), in_keys=["a"], out_keys=["c", "d", "e"])
    with pytest.raises(ValueError, match=r"select_out_keys: Can't select non existent key 'z'.*\['c', 'd', 'e'\]"):
        module.select_out_keys("z")
    with pytest.raises(ValueError, match=r"select_out_keys: \['d'\] is not a valid key, a key should be a string"):
        module.select_out_keys(["d"])
    seq = TensorDictSequential(module)
    with pytest.raises(ValueError, match="select_out_keys: Can't select non existent key 'z'"):
        seq.select_out_keys("z")


def test_dispatch_duplicated_argument():
    class Mod(torch.nn.Module):
        in_keys = ["a"]
        out_keys = ["b"]

        @dispatch
        def forward(self, tensordict):
            tensordict["b"] = tensordict["a"] + 1
            return tensordict

    assert Mod()(torch.zeros(1)) == 1
    with pytest.raises(
        RuntimeError, match="dispatch: Duplicated argument 'a', given both positionally and as a keyword"
    ):
        Mod()(torch.zeros(1), a=torch.zeros(1))


def test_lkj_cholesky_has_no_deterministic_value():
    module = ProbabilisticTensorDictModule(
        in_keys=[], out_keys=["out"], distribution_class=functools.partial(D.LKJCholesky, 3, 0.5)
    )
    for itype in ("deterministic", "mean", "mode"):
        with (
            set_interaction_type(itype),
            pytest.raises(RuntimeError, match="DETERMINISTIC, MEAN and MODE .*LKJCholesky"),
        ):
            module(TensorDict())
    with set_interaction_type("random"):
        assert module(TensorDict())["out"].shape == (3, 3)


# ------------------------------------------------------------------------------------------ more
def test_key_under_a_leaf():
    td = _td()
    for base in (KeyError, ValueError):
        with pytest.raises(
            base, match=r"Key \('a', 'x'\): Expected a TensorDictBase instance at \('a',\), but it is a leaf"
        ):
            td["a", "x"]
    assert str(KeyValueError("plain words")) == "plain words"


def test_unflatten_keys_merges_and_refuses_collisions():
    td = TensorDict({"a.b": torch.zeros(3), "a": {"c": torch.ones(3)}}, [])
    out = td.unflatten_keys(".")
    assert sorted(out.keys(True, True)) == [("a", "b"), ("a", "c")]
    assert list(td["a"].keys()) == ["c"]  # the source is left as it was
    for source in (
        {"a.b.c": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}},
        {"a.b": torch.zeros(3), "a": {"b": {"c": torch.zeros(3)}}},
        {"a": {"b": torch.zeros(3)}, "a.b.c": torch.zeros(3)},
    ):
        with pytest.raises(KeyError, match=re.escape("Unflattening key(s) in tensordict will override an existing")):
            TensorDict(source, []).unflatten_keys(".")


def test_dims_out_of_range_and_repeated():
    td = TensorDict({}, [4, 5, 6])
    for base in (IndexError, ValueError):
        with pytest.raises(base, match=r"dim=3 is out of range for a batch of 3 dims"):
            td.permute(2, 3, 0)
    with pytest.raises(DimError, match="transpose: dim0 and dim1 must be within the range of the number of dimensions"):
        td.transpose(-5, -6)
    for base in (RuntimeError, ValueError):
        with pytest.raises(base, match=r"movedim: repeated dim in source \[0, 0\]"):
            td.movedim((0, 0), (1, 2))
    with pytest.raises(InvalidArgumentError, match=r"repeated dim in destination \[2, 2\]"):
        td.movedim((0, 1), (2, 2))
    with pytest.raises(ValueError, match="source and destination must have the same number of elements"):
        td.movedim((0,), (1, 2))


def test_too_many_indices():
    td = TensorDict({"a": torch.zeros(3)}, [3])
    with pytest.raises(IndexError, match=r"too many indices for tensor of dimension 1 \(the batch size is \[3\]\)"):
        td[:, 0]
    with pytest.raises(IndexError, match=r"too many indices for tensor of dimension 2 \(the lazy stack's batch"):
        lazy_stack([td, td])[:, :, 0]  # a batch of [2, 3]
    scalar = TensorDict({"a": torch.zeros(())}, [])
    for base in (IndexError, RuntimeError):
        with pytest.raises(base, match="indexing a tensordict with td.batch_dims==0 is not permitted"):
            scalar[0]


def test_pad_below_zero():
    td = TensorDict({"a": torch.zeros(3)}, [3])
    with pytest.raises(ShapeMismatchError, match=r"pad: negative output size, pad_size \[-10, 0\] shrinks batch dim 0"):
        td.pad([-10, 0])


def test_set_in_place_shape_mismatch():
    td = TensorDict({"a": torch.zeros(())}, [])
    for base in (RuntimeError, ValueError):
        with pytest.raises(base, match=r"Failed to update 'a'.*\(2,\).*\(\)"):
            td.set_("a", torch.randn(2))
    assert td["a"] == 0


def test_lazy_insert_batch_mismatch():
    stack = lazy_stack([TensorDict({}, [4]) for _ in range(2)])
    with pytest.raises(ValueError, match=r"insert: Batch sizes in tensordicts differs.*\[17\].*\[4\]"):
        stack.insert(0, TensorDict({}, [17]))
    assert len(stack.tensordicts) == 2


def test_from_modules_as_module_needs_a_dense_stack():
    modules = [torch.nn.Linear(3, 4) for _ in range(2)]
    for base in (RuntimeError, ValueError):
        with pytest.raises(base, match="within a TensorDictParams"):
            TensorDict.from_modules(*modules, as_module=True, lazy_stack=True)


def test_cat_with_a_tensor_among_collections():
    td = TensorDict(a=TensorDict(b=torch.zeros(2, 1), batch_size=[2]), batch_size=[2])
    with pytest.raises(TypeError, match=r"cat: no implementation found for a Tensor \(item 1\)"):
        torch.cat([td, TensorDict(a=torch.zeros(2, 3), batch_size=[2])])


def test_tensorclass_setitem_and_setattr():
    @tensorclass
    class A:
        x: torch.Tensor
        y: torch.Tensor

    @tensorclass
    class B:
        x: torch.Tensor
        z: torch.Tensor

    a = A(x=torch.zeros(3), y=torch.zeros(3), batch_size=[3])
    b = B(x=torch.ones(3), z=torch.ones(3), batch_size=[3])
    for base in (KeyError, ValueError):
        with pytest.raises(base, match=r"A\[index\] = value: __setitem__ is only allowed for same-class or compatible"):
            a[:2] = b[:2]
    assert (a.x == 0).all()
    with pytest.raises(AttributeError, match=r"Cannot set the attribute 'w' on A: it is not a field"):
        a.w = torch.zeros(3)


def test_tensorclass_shadowing_field():
    with pytest.raises(
        AttributeError, match=r"Attribute name reshape can't be used with @tensorclass: the field 'reshape'"
    ):

        @tensorclass
        class Bad:
            reshape: torch.Tensor


def test_module_key_lists():
    with pytest.raises(ValueError, match=r"out_keys must be of type list, str or tuples of str .*got None"):
        TensorDictModule(torch.nn.Identity(), in_keys=["a"], out_keys=None)
    with pytest.raises(ValueError, match=r"in_keys must be of type list, str or tuples of str: 123 in \[123\]"):
        TensorDictModule(torch.nn.Identity(), in_keys=[123], out_keys=["b"])
