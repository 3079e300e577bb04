"""TypedTensorDict: fields from annotations, keyword construction, options, typed results.

Expected values were observed with the real tensordict 0.14.3 (``tensordict.TypedTensorDict``),
except where a comment says "differs": the documented differences of ``tdict.typed``.
"""
# Fields are written with values of other types than annotated on purpose (casting options).
# pyright: reportArgumentType=false, reportAttributeAccessIssue=false, reportInvalidTypeForm=false

from __future__ import annotations

import copy
import pickle
from typing import ClassVar

import numpy as np
import pytest
import torch
import torch._dynamo.testing
from torch.utils._pytree import tree_flatten, tree_map
from typing_extensions import NotRequired

from tdict import LazyStackedTensorDict, NonTensorData, TensorDict, TensorDictBase, TypedTensorDict, lazy_stack

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


class Predictor(TypedTensorDict):
    eta: torch.Tensor
    X: torch.Tensor
    beta: torch.Tensor


class Observed(Predictor):
    y: torch.Tensor
    noise: NotRequired[torch.Tensor]
    scale: ClassVar[float] = 2.0
    _cache: int


class Survival(Observed):
    event: torch.Tensor


class Shadowing(TypedTensorDict["shadow"]):
    data: torch.Tensor
    clone: torch.Tensor


class Frozen(TypedTensorDict["frozen"]):
    x: torch.Tensor


class Nested(TypedTensorDict):
    a: torch.Tensor
    child: TensorDict


def predictor(n: int = 5) -> Predictor:
    g = torch.Generator().manual_seed(n)
    return Predictor(
        eta=torch.randn(n, 3, generator=g),
        X=torch.randn(n, 4, generator=g),
        beta=torch.randn(n, 1, generator=g),
        batch_size=[n],
    )


# ---------------------------------------------------------------- fields
def test_fields_accumulate_across_subclasses_in_declaration_order():
    assert Predictor._ttd_fields == ("eta", "X", "beta")
    assert Observed._ttd_fields == ("eta", "X", "beta", "y", "noise")  # no ClassVar, no _private name
    assert Survival.__expected_keys__ == frozenset({"eta", "X", "beta", "y", "noise", "event"})
    assert Survival.__required_keys__ == frozenset({"eta", "X", "beta", "y", "event"})
    assert Survival.__optional_keys__ == frozenset({"noise"})
    assert Predictor.__optional_keys__ == frozenset()
    assert Observed.scale == 2.0


def test_string_annotations_of_a_local_class_are_read_without_evaluation():
    def make():
        class Local(TypedTensorDict):
            x: LocalType  # noqa: F821  # pyright: ignore[reportUndefinedVariable]  (never resolvable: kept as text)
            y: NotRequired[LocalType]  # noqa: F821  # pyright: ignore[reportUndefinedVariable]
            z: ClassVar[LocalType]  # noqa: F821  # pyright: ignore[reportUndefinedVariable]

        return Local

    local = make()
    assert local._ttd_fields == ("x", "y")
    assert local.__required_keys__ == frozenset({"x"}) and local.__optional_keys__ == frozenset({"y"})


def test_redeclared_field_can_become_optional():
    class Loose(Predictor):
        beta: NotRequired[torch.Tensor]

    assert Loose.__required_keys__ == frozenset({"eta", "X"})
    s = Loose(eta=torch.zeros(2), X=torch.zeros(2), batch_size=[2])
    assert set(s.keys()) == {"eta", "X"}


# ---------------------------------------------------------------- construction
def test_keyword_construction():
    s = Predictor(eta=torch.randn(5, 3), X=torch.randn(5, 4), beta=torch.randn(5, 1), batch_size=[5], device="cpu")
    assert type(s) is Predictor and isinstance(s, TypedTensorDict) and isinstance(s, TensorDictBase)
    assert not isinstance(s, TensorDict)
    assert s.batch_size == torch.Size([5]) and s.device == torch.device("cpu")
    assert set(s.keys()) == {"eta", "X", "beta"}
    assert type(s._source) is TensorDict and not s.is_locked
    named = Predictor(
        eta=torch.zeros(3, 2), X=torch.zeros(3, 2), beta=torch.zeros(3, 2), batch_size=[3, 2], names=["b", "t"]
    )
    assert named.names == ["b", "t"]
    assert Predictor(eta=torch.zeros(2), X=torch.zeros(2), beta=torch.zeros(2), batch_size=[2], lock=True).is_locked


def test_missing_and_unexpected_fields_raise_type_error_naming_them():
    with pytest.raises(TypeError, match=r"Predictor\(\) missing required field\(s\): beta \(got: eta, X\)"):
        Predictor(eta=torch.zeros(5), X=torch.zeros(5), batch_size=[5])
    with pytest.raises(
        TypeError, match=r"Predictor\(\) got unexpected field\(s\): z \(declared fields: eta, X, beta\)"
    ):
        Predictor(eta=torch.zeros(5), X=torch.zeros(5), beta=torch.zeros(5), z=torch.zeros(5), batch_size=[5])
    with pytest.raises(RuntimeError, match=r"Key 'eta'.*\[4\]"):
        Predictor(eta=torch.zeros(3), X=torch.zeros(3), beta=torch.zeros(3), batch_size=[4])


def test_optional_field_may_be_left_out():
    obs = Observed(eta=torch.zeros(3), X=torch.zeros(3), beta=torch.zeros(3), y=torch.zeros(3), batch_size=[3])
    assert "noise" not in obs and set(obs.keys()) == {"eta", "X", "beta", "y"}
    with pytest.raises(AttributeError, match="'Observed' has field 'noise' declared but not set"):
        _ = obs.noise
    obs.noise = torch.ones(3)
    assert torch.equal(obs.noise, torch.ones(3))
    del obs.noise
    assert "noise" not in obs


def test_positional_source_is_checked_like_keywords():
    # differs: tensordict takes a positional mapping as it is, unchecked
    s = Predictor({"eta": torch.zeros(2), "X": torch.zeros(2)}, beta=torch.ones(2), batch_size=[2])
    assert set(s.keys()) == {"eta", "X", "beta"}
    with pytest.raises(TypeError, match="missing required field"):
        Predictor({"eta": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(TypeError, match="got field 'eta' both in the source and as a keyword"):
        Predictor({"eta": torch.zeros(2)}, eta=torch.zeros(2), X=torch.zeros(2), beta=torch.zeros(2), batch_size=[2])
    with pytest.raises(TypeError, match="must be a mapping or a TensorDict, got list"):
        Predictor([1, 2])


def test_spreading_into_a_subclass():
    s = predictor()
    d = dict(**s)
    assert set(d) == {"eta", "X", "beta"} and all(isinstance(v, torch.Tensor) for v in d.values())
    obs = Observed(**s, y=s.eta * 2, batch_size=s.batch_size)
    assert type(obs) is Observed and torch.equal(obs.y, s.eta * 2) and obs.eta is s.eta


def test_empty_subclass():
    class Empty(TypedTensorDict):
        pass

    e = Empty(batch_size=[3])
    assert e.batch_size == torch.Size([3]) and len(e.keys()) == 0


# ---------------------------------------------------------------- attributes
def test_attribute_get_and_set_go_to_the_entries():
    s = predictor()
    assert s.eta is s["eta"] and s.X.shape == (5, 4)
    s.eta = torch.ones(5, 3)
    assert torch.equal(s["eta"], torch.ones(5, 3))
    s["X"] = torch.zeros(5, 4)
    assert torch.equal(s.X, torch.zeros(5, 4))
    with pytest.raises(RuntimeError, match=r"Key 'eta'.*\[5\]"):
        s.eta = torch.zeros(4, 3)
    assert torch.equal(s.eta, torch.ones(5, 3))  # nothing written


def test_unknown_attributes():
    s = predictor()
    with pytest.raises(AttributeError, match="'Predictor' object has no attribute 'nonexistent'"):
        _ = s.nonexistent
    # differs: tensordict stores a plain Python attribute
    with pytest.raises(AttributeError, match=r"Cannot set attribute 'etta' on Predictor: it is not a declared field"):
        s.etta = torch.zeros(5)
    s["extra"] = torch.zeros(5)  # undeclared keys are written as items
    assert set(s.keys()) == {"eta", "X", "beta", "extra"}
    s._note = "kept on the instance"
    assert s._note == "kept on the instance"


def test_non_tensor_field_reads_its_payload():
    class Tagged(TypedTensorDict):
        x: torch.Tensor
        tag: str

    t = Tagged(x=torch.zeros(3), tag="hi", batch_size=[3])
    assert t["tag"] == "hi"
    assert t.tag == "hi"  # differs: tensordict gives the NonTensorData
    assert isinstance(t.get("tag"), NonTensorData)
    assert t[1:].tag == "hi"


def test_a_field_clashing_with_the_api_needs_shadow():
    with pytest.raises(AttributeError, match="field 'clone' shadows a TensorDictBase attribute"):

        class Bad(TypedTensorDict):
            clone: torch.Tensor

    with pytest.raises(AttributeError, match="field 'data' shadows a TensorDictBase attribute"):

        class Bad2(TypedTensorDict):
            data: torch.Tensor

    s = Shadowing(data=torch.zeros(3, 2), clone=torch.ones(3, 4), batch_size=[3])
    assert s.data.shape == (3, 2) and s.clone.shape == (3, 4)
    s.data = torch.ones(3, 2)
    assert torch.equal(s["data"], torch.ones(3, 2))


def test_class_definition_errors():
    with pytest.raises(TypeError, match="field 'x' has a class attribute 1; TypedTensorDict fields take no default"):

        class WithDefault(TypedTensorDict):
            x: int = 1

    with pytest.raises(TypeError, match="field name 'lock' is a keyword of the constructor"):

        class Lock(TypedTensorDict):
            lock: torch.Tensor

    with pytest.raises(TypeError, match=r"unknown option\(s\) \['bogus'\]"):

        class Bogus(TypedTensorDict, bogus=True):
            x: torch.Tensor


# ---------------------------------------------------------------- options
def test_option_bases():
    base = TypedTensorDict["shadow", "frozen"]
    assert base.__name__ == "TypedTensorDict_shadow_frozen" and base._shadow and base._frozen
    assert TypedTensorDict["shadow", "frozen"] is base
    assert not TypedTensorDict._frozen
    with pytest.raises(ValueError, match=r"Unknown TypedTensorDict option\(s\) \['invalid_option'\]"):
        TypedTensorDict["invalid_option"]
    with pytest.raises(TypeError, match="autocast is exclusive with nocast"):
        TypedTensorDict["autocast", "nocast"]  # differs: tensordict accepts (and ignores) both


def test_frozen_instances_are_locked_and_subclasses_inherit_it():
    f = Frozen(x=torch.zeros(3), batch_size=[3])
    assert f.is_locked
    with pytest.raises(RuntimeError, match=r"Cannot modify locked TensorDict.*'x'"):
        f["x"] = torch.ones(3)
    with pytest.raises(RuntimeError, match="locked"):
        f.x = torch.ones(3)
    f.set_("x", torch.ones(3))  # in-place writes stay allowed
    assert torch.equal(f.x, torch.ones(3))
    assert not f.clone().is_locked and not f[0].is_locked  # as in tensordict

    class Child(Frozen):
        y: torch.Tensor

    assert Child._frozen and Child(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2]).is_locked

    class Thawed(Frozen, frozen=False):
        y: torch.Tensor

    assert not Thawed(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2]).is_locked


def test_nocast_keeps_python_numbers():
    class Count(TypedTensorDict["nocast"]):
        n: int
        x: torch.Tensor

    c = Count(n=3, x=torch.zeros(()))
    assert c.n == 3 and type(c.n) is int and isinstance(c.get("n"), NonTensorData)
    c.n = 2.5
    assert c.n == 2.5
    c["n"] = np.int64(4)
    assert c.n == 4


def test_autocast_casts_to_the_annotation():
    class Cast(TypedTensorDict["autocast"]):
        n: int
        s: str
        x: torch.Tensor

    c = Cast(n=torch.tensor(3), s=5, x=2.5)
    assert (c.n, c.s) == (3, "5") and type(c.n) is int
    assert torch.equal(c.x, torch.tensor(2.5))
    c.set("n", 7.9)
    assert c.n == 7


def test_tensor_only_checks_annotations_and_reads_stored_entries():
    with pytest.raises(TypeError, match="tensor_only requires tensor or collection annotations; field 's'"):

        class Bad(TypedTensorDict["tensor_only"]):
            s: str

    class Raw(TypedTensorDict["tensor_only"]):
        x: torch.Tensor
        sub_td: TensorDict

    r = Raw(x=torch.zeros(2), sub_td={"a": torch.ones(2)}, batch_size=[2])
    assert type(r.sub_td) is TensorDict and torch.equal(r.sub_td["a"], torch.ones(2))


# ---------------------------------------------------------------- operations keep the class
OPS = {
    "clone": lambda s: s.clone(),
    "clone_shallow": lambda s: s.clone(False),
    "copy": lambda s: s.copy(),
    "index_int": lambda s: s[0],
    "index_slice": lambda s: s[1:3],
    "index_mask": lambda s: s[torch.tensor([True, False, True, False, True])],
    "index_tensor": lambda s: s[torch.tensor([4, 0])],
    "to_dtype": lambda s: s.to(torch.float64),
    "to_device": lambda s: s.to("cpu"),
    "float": lambda s: s.float(),
    "apply": lambda s: s.apply(lambda x: x * 2),
    "named_apply": lambda s: s.named_apply(lambda k, x: x + 1),
    "add": lambda s: s + 1,
    "mul_td": lambda s: s * s,
    "neg": lambda s: -s,
    "exp": lambda s: s.exp(),
    "clamp": lambda s: s.clamp(-1, 1),
    "reshape": lambda s: s.reshape(5, 1),
    "view": lambda s: s.view(-1),
    "unsqueeze": lambda s: s.unsqueeze(0),
    "expand": lambda s: s.expand(2, 5),
    "select": lambda s: s.select("eta", "X"),
    "exclude": lambda s: s.exclude("beta"),
    "empty": lambda s: s.empty(),
    "detach": lambda s: s.detach(),
    "contiguous": lambda s: s.contiguous(),
    "masked_fill": lambda s: s.masked_fill(torch.ones(5, dtype=torch.bool), 0.0),
    "where": lambda s: s.where(torch.ones(5, dtype=torch.bool), 0.0),
    "flatten_keys": lambda s: s.flatten_keys(),
    "stack": lambda s: torch.stack([s, s], 1),
    "cat": lambda s: torch.cat([s, s]),
    "torch.clone": lambda s: torch.clone(s),
    "zeros_like": lambda s: torch.zeros_like(s),
    "pytree_map": lambda s: tree_map(lambda x: x + 1, s),
    "deepcopy": lambda s: copy.deepcopy(s),
    "pickle": lambda s: pickle.loads(pickle.dumps(s)),
}


@pytest.mark.parametrize("name", list(OPS))
def test_operations_return_the_typed_class_with_the_plain_values(name):
    s = predictor()
    out = OPS[name](s)
    expected = OPS[name](s.to_tensordict())
    assert type(out) is Predictor
    assert type(out._source) is TensorDict
    assert out.batch_size == expected.batch_size
    assert list(out.keys()) == list(expected.keys())
    for key, value in expected.items():
        torch.testing.assert_close(out[key], value)


def test_tuple_results_are_typed():
    s = predictor()
    for parts in (s.unbind(0), s.split(2), s.chunk(2), tuple(s), torch.unbind(s, 0)):
        assert all(type(p) is Predictor for p in parts)
    assert [p.batch_size[0] for p in s.split(2)] == [2, 2, 1]
    sel, rest = s.split_keys(["eta"])
    assert type(sel) is Predictor and set(sel.keys()) == {"eta"} and set(rest.keys()) == {"X", "beta"}
    _, kept = s.split_keys(["eta"], inplace=True)
    assert kept is s and set(s.keys()) == {"X", "beta"}


def test_in_place_methods_return_the_instance():
    s = predictor()
    assert s.apply_(lambda x: x + 1) is s
    assert s.update({"eta": torch.ones(5, 3)}) is s and torch.equal(s.eta, torch.ones(5, 3))
    assert s.set("eta", torch.zeros(5, 3)) is s
    assert s.zero_() is s and s.X.abs().sum() == 0
    assert s.lock_() is s and s.is_locked
    assert s.unlock_() is s and not s.is_locked
    assert (s.__iadd__(1)) is s and torch.equal(s.X, torch.ones(5, 4))
    assert s.rename_key_("X", "Z") is s and "Z" in s.keys()
    assert s.del_("Z") is s and "Z" not in s.keys()


def test_lock_context_manager_restores_the_lock():
    f = Frozen(x=torch.zeros(2), batch_size=[2])
    with f.unlock_():
        f["extra"] = torch.ones(2)
    assert f.is_locked and set(f.keys()) == {"x", "extra"}


def test_reductions_comparisons_and_conversions_are_plain():
    s = predictor()
    for out in (s == s, s.sum(dim=0), s.mean(0), s.to_tensordict(), s.abs() > 0):
        assert type(out) is TensorDict
    assert s.sum(dim=0).batch_size == torch.Size([])
    assert bool((s == s).all()) and bool(s.any())
    assert isinstance(s.to_dict()["eta"], torch.Tensor)
    assert type(s.to_lazystack()) is LazyStackedTensorDict


def test_typed_entries_stay_typed_in_a_tensordict():
    s = predictor()
    parent = TensorDict(s=s, batch_size=[5])
    for out in (parent[1:3], parent.clone(), parent.add(1), parent.to(torch.float64), torch.stack([parent, parent])):
        assert type(out["s"]) is Predictor
    assert type(parent[0]["s"]) is Predictor and parent[0]["s"].batch_size == torch.Size([])
    nested = Nested(a=torch.zeros(4), child=TensorDict(inner=torch.ones(4, 2), batch_size=[4]), batch_size=[4])
    assert type(nested.child) is TensorDict and type(nested[1:].child) is TensorDict
    assert torch.equal(nested["child", "inner"], torch.ones(4, 2))


def test_stack_mixes_and_lazy_stack():
    s = predictor()
    assert type(torch.stack([s, s.to_tensordict()])) is Predictor  # the first collection's class, as in tensordict
    assert type(torch.stack([s.to_tensordict(), s])) is TensorDict
    lazy = lazy_stack([s, s])
    assert type(lazy) is LazyStackedTensorDict and all(type(m) is Predictor for m in lazy.tensordicts)
    out = TensorDict(eta=torch.zeros(2, 5, 3), X=torch.zeros(2, 5, 4), beta=torch.zeros(2, 5, 1), batch_size=[2, 5])
    typed_out = Predictor.from_tensordict(out)
    assert torch.stack([s, s], out=typed_out) is typed_out and torch.equal(out["eta"][1], s.eta)


# ---------------------------------------------------------------- from_tensordict and friends
def test_from_tensordict_wraps_without_a_copy():
    td = predictor().to_tensordict()
    s = Predictor.from_tensordict(td)
    assert type(s) is Predictor and s._source is td
    s.eta = torch.ones(5, 3)
    assert torch.equal(td["eta"], torch.ones(5, 3))  # live link
    td["extra"] = torch.zeros(5)
    assert "extra" in s.keys()
    assert Predictor.from_tensordict(s)._source is td  # a typed instance: its backing collection
    with pytest.raises(TypeError, match=r"Predictor.from_tensordict\(\) missing required field\(s\): X, beta"):
        Predictor.from_tensordict(TensorDict(eta=torch.zeros(5), batch_size=[5]))
    with pytest.raises(TypeError, match="expects a TensorDict, got dict"):
        Predictor.from_tensordict({"eta": torch.zeros(5)})
    partial = Predictor.from_tensordict(TensorDict(eta=torch.zeros(5), batch_size=[5]), check=False)
    with pytest.raises(AttributeError, match="declared but not set"):
        _ = partial.X
    partial["X"] = torch.zeros(5, 4)
    assert partial.X.shape == (5, 4)


def test_from_tensordict_over_a_lazy_stack():
    members = [TensorDict(eta=torch.full((3,), float(i)), X=torch.zeros(4), beta=torch.zeros(1)) for i in range(2)]
    s = Predictor.from_tensordict(lazy_stack(members))
    assert s.batch_size == torch.Size([2]) and s.eta.shape == (2, 3)
    assert type(s[1]) is Predictor and torch.equal(s[1].eta, torch.ones(3))
    assert type(s.clone()._source) is LazyStackedTensorDict


def test_memmap_round_trip(tmp_path):
    s = predictor()
    s.memmap(tmp_path / "state")
    loaded = Predictor.load_memmap(tmp_path / "state")
    assert type(loaded) is Predictor and loaded._is_memmap
    for key in ("eta", "X", "beta"):
        assert torch.equal(loaded[key], s[key])
    assert s.memmap_(tmp_path / "inplace") is s and s.is_memmap()
    with pytest.raises(TypeError, match="missing required field"):
        Frozen.load_memmap(tmp_path / "state")


def test_from_dict():
    s = Predictor.from_dict({"eta": torch.zeros(2, 3), "X": torch.zeros(2, 4), "beta": torch.zeros(2, 1)})
    assert type(s) is Predictor and s.batch_size == torch.Size([2])
    with pytest.raises(TypeError, match="missing required field"):
        Predictor.from_dict({"eta": torch.zeros(2)})


# ---------------------------------------------------------------- pytree and compile
def test_pytree_flattens_into_the_backing_collection():
    s = predictor()
    leaves, spec = tree_flatten(s)
    assert len(leaves) == 3 and all(isinstance(x, torch.Tensor) for x in leaves)
    rebuilt = torch.utils._pytree.tree_unflatten([x * 0 for x in leaves], spec)
    assert type(rebuilt) is Predictor and rebuilt.batch_size == s.batch_size and rebuilt.eta.abs().sum() == 0


def test_vmap_over_a_typed_instance():
    s = predictor()
    out = torch.vmap(lambda t: t.apply(lambda x: x.sum(-1)))(s)
    assert type(out) is Predictor and out.batch_size == torch.Size([5])
    torch.testing.assert_close(out.eta, s.eta.sum(-1))


COMPILED = {
    "attr": lambda s: s.eta + 1,
    "construct": lambda s: Predictor(eta=s.eta, X=s.X, beta=s.beta, batch_size=[5]).beta * 2,
    "add": lambda s: s + 1,
    "index": lambda s: s[1:3],
    "stack": lambda s: torch.stack([s, s]),
    "setattr": lambda s: setattr(s, "eta", s.eta + 1) or s,
}


@pytest.mark.parametrize("name", list(COMPILED))
def test_compile_fullgraph_matches_eager(name):
    torch.compiler.reset()
    counter = torch._dynamo.testing.CompileCounter()
    fn = COMPILED[name]
    compiled = torch.compile(fn, fullgraph=True, backend=counter)(predictor())
    eager = fn(predictor())
    assert counter.frame_count == 1
    assert type(compiled) is type(eager)
    if isinstance(eager, torch.Tensor):
        torch.testing.assert_close(compiled, eager)
    else:
        assert compiled.batch_size == eager.batch_size
        for key in eager.keys():
            torch.testing.assert_close(compiled[key], eager[key])
    torch.compiler.reset()


# ---------------------------------------------------------------- property: typed == plain
SHAPE_OPS = [
    ("clone", lambda t, bs: t.clone()),
    ("index0", lambda t, bs: t[bs[0] - 1]),
    ("slice", lambda t, bs: t[: max(1, bs[0] // 2)]),
    ("flatten", lambda t, bs: t.reshape(-1)),
    ("unsqueeze", lambda t, bs: t.unsqueeze(-1)),
    ("apply", lambda t, bs: t.apply(lambda x: x * 3 - 1)),
    ("stack", lambda t, bs: torch.stack([t, t], len(bs))),
    ("cat", lambda t, bs: torch.cat([t, t], 0)),
    ("transpose", lambda t, bs: t.transpose(0, -1)),
]


@given(
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    feature=st.integers(1, 3),
    op=st.sampled_from(SHAPE_OPS),
    seed=st.integers(0, 2**16),
)
def test_typed_operations_match_the_plain_tensordict(batch, feature, op, seed):
    g = torch.Generator().manual_seed(seed)
    fields = {k: torch.randn(*batch, feature, generator=g) for k in ("eta", "X", "beta")}
    typed = Predictor(**fields, batch_size=batch)
    reference = TensorDict(fields, batch_size=batch)
    name, fn = op
    out, expected = fn(typed, batch), fn(reference, batch)
    assert type(out) is Predictor, name
    assert out.batch_size == expected.batch_size
    for key in ("eta", "X", "beta"):
        assert torch.equal(out[key], expected[key])
        assert torch.equal(getattr(out, key), expected[key])
