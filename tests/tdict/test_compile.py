"""torch.compile(fullgraph=True) traces the core TensorDict ops; compiled and eager results match.

Most cases use the "eager" backend (Dynamo tracing is what is under test and inductor codegen
is slow on small machines); one test runs aot_eager with a backward pass, one the default
inductor backend.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.testing
from torch.utils._pytree import tree_map

from tdict import TensorDict


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def make_td(n: int) -> TensorDict:
    g = torch.Generator().manual_seed(n)
    return TensorDict(
        {
            "obs": torch.randn(n, 3, generator=g),
            "reward": torch.randn(n, generator=g),
            "next": {"obs": torch.randn(n, 3, generator=g), "done": torch.zeros(n, dtype=torch.bool)},
        },
        batch_size=[n],
    )


def assert_same(actual, expected):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.shape == expected.shape and actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, TensorDict):
        assert type(actual) is TensorDict
        assert actual.batch_size == expected.batch_size and actual.names == expected.names
        assert list(actual.keys(True)) == list(expected.keys(True))
        for key, value in expected.items():
            assert_same(actual.get(key), value)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    else:
        assert actual == expected


CASES = {
    "get": lambda td: td.get("obs") * 2,
    "get_nested": lambda td: td.get(("next", "obs")) + td["next", "obs"],
    "get_default": lambda td: td["obs"] if td.get("missing", None) is None else td["reward"],
    "set": lambda td: td.set("action", td["obs"].tanh()),
    "set_nested": lambda td: td.set(("next", "reward"), td["reward"] + 1).set(("new", "leaf"), td["obs"]),
    "setitem_index": lambda td: (td.__setitem__(slice(0, 2), td[2:4].clone()), td)[1],
    "index_int": lambda td: td[1],
    "index_slice": lambda td: td[1:3],
    "index_tensor": lambda td: td[torch.tensor([0, 2, 2])],
    "index_mask": lambda td: td[td["reward"] > 0],
    "stack": lambda td: torch.stack([td, td * 2], 1),
    "stack_of_items": lambda td: torch.stack([td[0], td[1], td[2]], 0),
    "cat": lambda td: torch.cat([td, td[:2]], 0),
    "apply": lambda td: td.apply(lambda x: x.float() * 2 + 1),
    "apply_two": lambda td: td.apply(lambda x, y: x.float() - y.float(), td.clone()),
    "add_td": lambda td: td.exclude("next") + td.exclude("next"),
    "mul_scalar": lambda td: td.select("obs", "reward") * 2,
    "inplace_add": lambda td: td.select("obs", "reward").add_(1.5),
    "construct": lambda td: TensorDict({"x": td["obs"] + 1, "n": {"y": td["reward"]}}, batch_size=td.batch_size),
    "construct_from_scratch": lambda td: TensorDict(obs=torch.ones(td.shape[0], 2), batch_size=[td.shape[0]]),
    "clone": lambda td: td.clone(),
    "reshape": lambda td: td.reshape(2, -1),
    "unsqueeze": lambda td: td.unsqueeze(0).unsqueeze(-1),
    "select_exclude_update": lambda td: td.select("obs").update(td.exclude("obs")),
    "reductions": lambda td: td.exclude("next").sum(0),
    "masked_fill": lambda td: td.exclude("next").masked_fill(td["reward"] > 0, 0.0),
    "unbind": lambda td: td.unbind(0)[1],
    "to_dtype": lambda td: td.exclude("next").to(torch.float64),
    "tree_map": lambda td: tree_map(lambda x: x * 2, td.exclude("next")),
    "vmap": lambda td: torch.vmap(lambda t: t["obs"].sum() + t["reward"])(td),
    "vmap_returns_td": lambda td: torch.vmap(
        lambda t: t.exclude("next").apply(lambda x: x * 2).set("s", t["obs"].sum())
    )(td),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fullgraph_matches_eager(name):
    fn = CASES[name]
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    # two batch sizes: the second call recompiles with a dynamic batch dim (SymInt batch sizes)
    for n in (4, 6):
        assert_same(compiled(make_td(n)), fn(make_td(n)))
    assert counter.frame_count <= 2


def test_input_structure_mutation_is_replayed():
    td_eager, td_compiled = make_td(4), make_td(4)

    def fn(td):
        td.set(("next", "value"), td["reward"] * 2)
        del td["obs"]
        return td["reward"].sum()

    fn(td_eager)
    torch.compile(fn, fullgraph=True, backend="eager")(td_compiled)
    assert_same(td_compiled, td_eager)


def test_aot_eager_backward_matches_eager():
    def loss(td):
        td = td.apply(torch.tanh)
        return (torch.stack([td, td * 2], 0)["obs"] * td["reward"].unsqueeze(-1)).sum()

    grads = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        td = make_td(4).exclude("next").apply(lambda x: x.requires_grad_())
        fn(td).backward()
        grads.append((td["obs"].grad, td["reward"].grad))
    assert_same(grads[1], grads[0])


def test_inductor_backend():
    def fn(td):
        out = TensorDict({"a": td["obs"], "b": {"c": td["reward"]}}, batch_size=td.batch_size)
        out = torch.cat([out[1:], out[:1]], 0) * 2 + out
        return out.apply(torch.sin)

    td = make_td(5)
    assert_same(torch.compile(fn, fullgraph=True)(td), fn(td))


def test_errors_surface_from_compiled_code():
    td = make_td(3)
    # without fullgraph Dynamo falls back to eager for the failing frame: the usual error comes out
    with pytest.raises(KeyError, match="'missing' not found in TensorDict with keys"):
        torch.compile(lambda t: t.get("missing") + 1, backend="eager")(td)
    with pytest.raises(IndexError, match="out of range"):
        torch.compile(lambda t: t[7], backend="eager")(td)
    # with fullgraph=True the error is reported as a Dynamo "Observed exception" carrying it
    with pytest.raises(torch._dynamo.exc.Unsupported, match="with keys"):
        torch.compile(lambda t: t.get("missing") + 1, fullgraph=True, backend="eager")(td)
