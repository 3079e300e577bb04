"""Which results of a locked collection are locked (tensordict 0.14's values, op by op)."""

from __future__ import annotations

import pytest
import torch

import tdict
from tdict import TensorDict, lazy_stack

_MASK = torch.ones(2, 3, 4, dtype=torch.bool)

# locked in tensordict 0.14: shape ops, moves and casts, *_like, arithmetic, norm
LOCKED = {
    "reshape": lambda t: t.reshape(-1),
    "view": lambda t: t.view(-1),
    "flatten": lambda t: t.flatten(),
    "unflatten": lambda t: t.unflatten(0, (1, 2)),
    "permute": lambda t: t.permute(2, 1, 0),
    "transpose": lambda t: t.transpose(0, 1),
    "movedim": lambda t: t.movedim(0, 1),
    "swapdims": lambda t: t.swapdims(0, 1),
    "unsqueeze": lambda t: t.unsqueeze(-1),
    "squeeze": lambda t: t.unsqueeze(0).squeeze(),
    "expand": lambda t: t.expand(2, 2, 3, 4),
    "expand_as": lambda t: t.expand_as(torch.zeros(2, 2, 3, 4)),
    "split": lambda t: t.split(1, 0)[0],
    "chunk": lambda t: t.chunk(2, 0)[1],
    "tensor_split": lambda t: t.tensor_split(2, 0)[0],
    "repeat": lambda t: t.repeat(1, 1, 2),
    "repeat_interleave": lambda t: t.repeat_interleave(2, dim=0),
    "roll": lambda t: t.roll(1, 0),
    "flip": lambda t: t.flip(0),
    "fliplr": lambda t: t.fliplr(),
    "rot90": lambda t: t.rot90(),
    "narrow": lambda t: t.narrow(0, 0, 1),
    "atleast_3d": lambda t: t.atleast_3d(),
    "to_device": lambda t: t.to("cpu"),
    "cpu": lambda t: t.cpu(),
    "to_dtype": lambda t: t.to(torch.float64),
    "double": lambda t: t.double(),
    "int": lambda t: t.int(),
    "half": lambda t: t.half(),
    "float64": lambda t: t.float64(),
    "to_batch_size": lambda t: t.to(batch_size=[2, 3]),
    "detach": lambda t: t.detach(),
    "zeros_like": lambda t: torch.zeros_like(t),
    "ones_like": lambda t: torch.ones_like(t),
    "empty_like": lambda t: torch.empty_like(t),
    "full_like": lambda t: torch.full_like(t, 2.0),
    "rand_like": lambda t: torch.rand_like(t),
    "add": lambda t: t + 1,
    "radd": lambda t: 1 + t,
    "sub": lambda t: t - 1,
    "rsub": lambda t: 1 - t,
    "mul": lambda t: t * 2,
    "div": lambda t: t / 2,
    "pow": lambda t: t**2,
    "mod": lambda t: t % 2,
    "add_td": lambda t: t + t,
    "neg": lambda t: -t,
    "abs": lambda t: t.abs(),
    "exp": lambda t: t.exp(),
    "sqrt": lambda t: t.sqrt(),
    "round": lambda t: t.round(),
    "isfinite": lambda t: t.isfinite(),
    "isnan": lambda t: t.isnan(),
    "sign": lambda t: t.sign(),
    "isposinf": lambda t: t.isposinf(),
    "invert": lambda t: ~t.bool(),
    "and": lambda t: t.bool() & t.bool(),
    "logical_and": lambda t: t.logical_and(t),
    "bitwise_and": lambda t: t.int().bitwise_and(t.int()),
    "maximum": lambda t: t.maximum(t),
    "minimum": lambda t: t.minimum(t),
    "clamp_min": lambda t: t.clamp_min(0),
    "clamp_max": lambda t: t.clamp_max(1),
    "lerp": lambda t: t.lerp(t, 0.5),
    "addcmul": lambda t: t.addcmul(t, t),
    "norm": lambda t: t.norm(),
    "nested": lambda t: t.reshape(-1)["n"],
    "lazy_reshape": lambda t: t.to_lazystack(0).lock_().reshape(-1),
    "lazy_add": lambda t: t.to_lazystack(0).lock_() + 1,
    "lazy_permute": lambda t: t.to_lazystack(0).lock_().permute(2, 1, 0),
    "lazy_double": lambda t: t.to_lazystack(0).lock_().double(),
}
# not locked in tensordict 0.14: indexing, copies, structure ops, comparisons, reductions, stack/cat...
UNLOCKED = {
    "index_int": lambda t: t[0],
    "index_slice": lambda t: t[:1],
    "index_tensor": lambda t: t[torch.tensor([0])],
    "index_mask": lambda t: t[torch.tensor([True, False])],
    "clone": lambda t: t.clone(),
    "copy": lambda t: t.copy(),
    "to_tensordict": lambda t: t.to_tensordict(),
    "unbind": lambda t: t.unbind(0)[0],
    "select": lambda t: t.select("a"),
    "exclude": lambda t: t.exclude("a"),
    "apply": lambda t: t.apply(lambda x: x + 1),
    "eq": lambda t: t == 1,
    "ne": lambda t: t != 1,
    "lt": lambda t: t < 1,
    "sum": lambda t: t.sum(0),
    "mean": lambda t: t.mean(0),
    "quantile": lambda t: t.quantile(0.5, 0),
    "cummax": lambda t: t.cummax(0).values,
    "softmax": lambda t: t.softmax(0),
    "contiguous": lambda t: t.contiguous(),
    "empty": lambda t: t.empty(),
    "stack": lambda t: torch.stack([t, t]),
    "cat": lambda t: torch.cat([t, t]),
    "where": lambda t: torch.where(_MASK, t, t),
    "masked_fill": lambda t: t.masked_fill(_MASK, 0),
    "gather": lambda t: t.gather(0, torch.zeros(1, 3, 4, dtype=torch.long)),
    "clamp": lambda t: t.clamp(0, 1),
    "new_zeros": lambda t: t.new_zeros(3),
    "flatten_keys": lambda t: t.flatten_keys(),
    "masked_select": lambda t: t.masked_select(torch.ones(2, dtype=torch.bool)),
    "pad": lambda t: tdict.pad(t, [0, 1]),
    "to_lazystack": lambda t: t.to_lazystack(0),
    "rename": lambda t: t.rename("x", "y", "z"),
}


def _locked() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(24.0).view(2, 3, 4) + 1, "n": {"b": torch.ones(2, 3, 4, 1)}}, [2, 3, 4]
    ).lock_()


@pytest.mark.parametrize("name", sorted(LOCKED))
def test_results_that_keep_the_lock(name):
    result = LOCKED[name](_locked())
    assert result.is_locked, name  # tdict returned unlocked results
    sub = result.get("n", None) if not isinstance(result, torch.Tensor) and "n" in result.keys() else None
    assert sub is None or sub.is_locked


@pytest.mark.parametrize("name", sorted(UNLOCKED))
def test_results_that_do_not(name):
    assert not UNLOCKED[name](_locked()).is_locked, name


def test_unlocked_inputs_give_unlocked_results_and_the_lock_is_the_results_own():
    plain = TensorDict({"a": torch.zeros(2, 3)}, [2, 3])
    assert not plain.reshape(-1).is_locked and not (plain + 1).is_locked
    locked = plain.clone().lock_()
    view = locked.view(-1)
    view.unlock_()  # unlocking the result leaves the source locked
    assert locked.is_locked and not view.is_locked
    assert lazy_stack([plain.clone(), plain.clone()]).lock_().unsqueeze(0).is_locked


def test_map_chunks_of_a_locked_input_are_writable():
    # map splits a shared (locked) input: the chunks are new structures a worker may add keys to
    from tdict._core import map as _map

    locked = TensorDict({"x": torch.zeros(4, 2)}, [4]).lock_()
    chunks = _map._split(locked, 0, 2, None, 2)
    assert [c.is_locked for c in chunks] == [False, False] and locked.is_locked


def test_assigning_is_locked_locks_and_unlocks_recursively():
    td = TensorDict(a=torch.zeros(2), sub=TensorDict(b=torch.zeros(2), batch_size=[2]), batch_size=[2])
    td.is_locked = True
    assert td.is_locked and td["sub"].is_locked
    with pytest.raises(RuntimeError):
        td["c"] = torch.zeros(2)
    td.is_locked = False
    assert not td.is_locked and not td["sub"].is_locked
    td["c"] = torch.zeros(2)
    assert "c" in td.keys()
