"""Property tests: a TensorDict against a plain dict of tensors doing the same thing leaf by leaf.

Random nested structures (keys from a small alphabet, up to 3 levels, sub-collections that may
carry extra batch dims of their own, empty sub-collections), random batch sizes (up to 3 dims,
sizes 0 to 3), random feature dims and dtypes per leaf. The reference indexes or reshapes each
tensor directly, interpreting the index / dims on the *batch* dims only: an Ellipsis spans the
batch dims (never a leaf's feature dims) and negative dims count from the last batch dim.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tdict import TensorDict

KEYS = ("a", "b", "c", "d")
DTYPES = (torch.float32, torch.int64, torch.bool)
FAST = settings(max_examples=60, deadline=None)
SLOW = settings(max_examples=200, deadline=None)

# --------------------------------------------------------------------------- random structures
# A spec maps key -> ("leaf", feature_shape, dtype) | ("node", extra_batch_dims, sub_spec).


@st.composite
def specs(draw, depth: int = 0, max_depth: int = 3, extra_dims: bool = True, empty_nodes: bool = True) -> dict:
    keys = draw(
        st.lists(st.sampled_from(KEYS), min_size=1 if depth == 0 or not empty_nodes else 0, max_size=3, unique=True)
    )
    out = {}
    for key in keys:
        if depth + 1 < max_depth and draw(st.integers(0, 2)) == 0:
            extra = tuple(draw(st.lists(st.integers(1, 2), max_size=1))) if extra_dims else ()
            out[key] = ("node", extra, draw(specs(depth + 1, max_depth, extra_dims, empty_nodes)))
        else:
            out[key] = ("leaf", tuple(draw(st.lists(st.integers(1, 3), max_size=2))), draw(st.sampled_from(DTYPES)))
    return out


batch_sizes = st.lists(st.integers(0, 3), max_size=3).map(tuple)


class Ref:
    """The reference: leaves as a flat {nested key: tensor} dict, and sub-collections' extra dims."""

    def __init__(self) -> None:
        self.leaves: dict[Any, torch.Tensor] = {}
        self.nodes: dict[Any, tuple] = {}  # nested key -> extra batch dims below the root's


def _key(path: tuple) -> Any:
    return path[0] if len(path) == 1 else path


def build(spec: dict, batch_size: tuple, start: int = 0) -> tuple[TensorDict, Ref]:
    """A TensorDict for ``spec`` with distinct values per element, and its reference."""
    ref = Ref()
    counter = [start]

    def make(spec, bs, extra_total, path):
        entries = {}
        for key, (kind, shape, more) in spec.items():
            here = path + (key,)
            if kind == "leaf":
                full = bs + shape
                numel = torch.Size(full).numel()
                values = torch.arange(counter[0], counter[0] + numel).reshape(full)
                counter[0] += numel
                tensor = values % 2 == 0 if more is torch.bool else values.to(more)
                entries[key] = tensor
                ref.leaves[_key(here)] = tensor
            else:
                sub_extra = extra_total + shape
                ref.nodes[_key(here)] = sub_extra
                entries[key] = make(more, bs + shape, sub_extra, here)
        return TensorDict(entries, batch_size=bs)

    return make(spec, tuple(batch_size), (), ()), ref


def assert_matches(td: TensorDict, leaves: dict, batch_size: tuple, nodes: dict | None = None) -> None:
    assert td.batch_size == torch.Size(batch_size)
    assert set(td.keys(True, True)) == set(leaves)
    for key, expected in leaves.items():
        got = td.get(key)
        assert got.dtype == expected.dtype, key
        assert got.shape == expected.shape, (key, got.shape, expected.shape)
        assert torch.equal(got, expected), key
    for key, extra in (nodes or {}).items():
        assert td.get(key).batch_size == torch.Size(batch_size) + extra, key


@st.composite
def td_and_ref(draw, extra_dims: bool = True, empty_nodes: bool = True, min_dims: int = 0):
    bs = draw(st.lists(st.integers(0, 3), min_size=min_dims, max_size=3).map(tuple))
    spec = draw(specs(extra_dims=extra_dims, empty_nodes=empty_nodes))
    td, ref = build(spec, bs)
    return td, ref, bs, spec


# --------------------------------------------------------------------------- random indices
@st.composite
def indices(draw, bs: tuple):
    """An index into batch dims ``bs``: a single item or a tuple of ints, slices, None, one
    Ellipsis, LongTensors, lists of ints and boolean masks."""
    n = len(bs)
    parts: list = []
    pos = 0  # batch dims consumed so far
    seen_ellipsis = False
    for _ in range(draw(st.integers(1, 4))):
        choices = []
        if pos < n:
            choices += ["slice", "int", "tensor", "list", "mask"] if bs[pos] > 0 else ["slice", "tensor", "mask"]
        choices.append("none")
        if not seen_ellipsis:
            choices.append("ellipsis")
        kind = draw(st.sampled_from(choices))
        if kind == "none":
            parts.append(None)
            continue
        if kind == "ellipsis":
            parts.append(Ellipsis)
            seen_ellipsis = True
            continue
        if seen_ellipsis:  # after "...", dims are counted from the end: keep it simple, only slices/ints
            kind = "slice" if kind in ("tensor", "list", "mask") else kind
        size = bs[pos]
        if kind == "int":
            parts.append(draw(st.integers(-size, size - 1)))
            pos += 1
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-size - 1, size + 1))
            parts.append(slice(draw(bound), draw(bound), draw(st.one_of(st.none(), st.integers(1, 3)))))
            pos += 1
        elif kind in ("tensor", "list"):
            values = draw(st.lists(st.integers(-size, size - 1), max_size=3)) if size else []
            if kind == "list" and values:
                parts.append(values)
            else:
                parts.append(torch.tensor(values, dtype=torch.long))
            pos += 1
        else:
            k = draw(st.integers(1, n - pos))
            shape = bs[pos : pos + k]
            parts.append(
                torch.tensor(
                    draw(
                        st.lists(st.booleans(), min_size=torch.Size(shape).numel(), max_size=torch.Size(shape).numel())
                    ),
                    dtype=torch.bool,
                ).reshape(shape)
            )
            pos += k
        if pos > n:
            break
    # after an Ellipsis the generator above may have consumed more dims than remain
    if seen_ellipsis and pos > n:
        parts = [p for p in parts if p is None or p is Ellipsis]
    if len(parts) == 1 and draw(st.integers(0, 2)) == 0:
        return parts[0]
    return tuple(parts)


def ref_index(index: Any, n_batch: int) -> Any:
    """The index a leaf gets: lists as LongTensors, an Ellipsis spanning the batch dims only."""
    parts = index if isinstance(index, tuple) else (index,)
    parts = tuple(torch.tensor(p, dtype=torch.long) if isinstance(p, list) else p for p in parts)
    consumed = 0
    for p in parts:
        if p is None or p is Ellipsis:
            continue
        consumed += p.dim() if isinstance(p, torch.Tensor) and p.dtype == torch.bool else 1
    if any(p is Ellipsis for p in parts):
        at = next(i for i, p in enumerate(parts) if p is Ellipsis)
        parts = parts[:at] + (slice(None),) * (n_batch - consumed) + parts[at + 1 :]
    return parts


def expected_batch_size(bs: tuple, ridx: Any):
    """The batch size of ``td[idx]``, or None when torch rejects the index on the batch dims."""
    try:
        return tuple(torch.zeros(bs)[ridx].shape)
    except (IndexError, RuntimeError, ValueError):
        return None


def _changed(t: torch.Tensor) -> torch.Tensor:
    return ~t if t.dtype == torch.bool else t + 1000


# --------------------------------------------------------------------------- indexing
@SLOW
@given(data=st.data())
def test_getitem_matches_per_leaf_indexing(data):
    td, ref, bs, _ = data.draw(td_and_ref())
    index = data.draw(indices(bs))
    ridx = ref_index(index, len(bs))
    new_bs = expected_batch_size(bs, ridx)
    if new_bs is None:
        with pytest.raises((IndexError, RuntimeError, ValueError)):
            td[index]
        return
    out = td[index]
    assert_matches(out, {k: v[ridx] for k, v in ref.leaves.items()}, new_bs, ref.nodes)


@SLOW
@given(data=st.data())
def test_setitem_matches_per_leaf_assignment(data):
    td, ref, bs, _ = data.draw(td_and_ref())
    index = data.draw(indices(bs))
    ridx = ref_index(index, len(bs))
    new_bs = expected_batch_size(bs, ridx)
    if new_bs is None:
        return
    use_scalar = data.draw(st.booleans())
    value = 1 if use_scalar else td[index].apply(_changed)
    expected = {}
    for key, leaf in ref.leaves.items():
        leaf = leaf.clone()
        leaf[ridx] = value if use_scalar else value.get(key)
        expected[key] = leaf
    td[index] = value
    assert_matches(td, expected, bs, ref.nodes)


@FAST
@given(data=st.data())
def test_indexing_with_a_mask_over_all_batch_dims(data):
    td, ref, bs, _ = data.draw(td_and_ref(min_dims=1))
    n = torch.Size(bs).numel()
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=torch.bool).reshape(bs)
    out = td[mask]
    assert_matches(out, {k: v[mask] for k, v in ref.leaves.items()}, (int(mask.sum()),))


@FAST
@given(data=st.data())
def test_indexing_with_a_mask_over_the_first_batch_dim(data):
    """A 1-D mask over the rows (the positions are found once, then the rows taken) equals per-leaf masking."""
    td, ref, bs, _ = data.draw(td_and_ref(min_dims=1))
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=bs[0], max_size=bs[0])), dtype=torch.bool)
    out = td[mask]
    assert_matches(out, {k: v[mask] for k, v in ref.leaves.items()}, (int(mask.sum()), *bs[1:]))


# --------------------------------------------------------------------------- shape ops
def _norm(dim: int, n: int) -> int:
    return dim % n


@FAST
@given(data=st.data())
def test_stack_matches_per_leaf(data):
    bs = data.draw(batch_sizes)
    spec = data.draw(specs())
    tds_refs = [build(spec, bs, start=1000 * i) for i in range(data.draw(st.integers(1, 3)))]
    dim = data.draw(st.integers(-len(bs) - 1, len(bs)))
    d = _norm(dim, len(bs) + 1)
    out = torch.stack([td for td, _ in tds_refs], dim)
    leaves = {k: torch.stack([r.leaves[k] for _, r in tds_refs], d) for k in tds_refs[0][1].leaves}
    assert_matches(out, leaves, bs[:d] + (len(tds_refs),) + bs[d:])


@FAST
@given(data=st.data())
def test_cat_matches_per_leaf(data):
    bs = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple))
    spec = data.draw(specs())
    dim = data.draw(st.integers(-len(bs), len(bs) - 1))
    d = _norm(dim, len(bs))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    parts = [build(spec, bs[:d] + (s,) + bs[d + 1 :], start=1000 * i) for i, s in enumerate(sizes)]
    out = torch.cat([td for td, _ in parts], dim)
    leaves = {k: torch.cat([r.leaves[k] for _, r in parts], d) for k in parts[0][1].leaves}
    assert_matches(out, leaves, bs[:d] + (sum(sizes),) + bs[d + 1 :])


@FAST
@given(data=st.data())
def test_unbind_and_split_match_per_leaf(data):
    td, ref, bs, _ = data.draw(td_and_ref(min_dims=1))
    dim = data.draw(st.integers(-len(bs), len(bs) - 1))
    d = _norm(dim, len(bs))
    pieces = td.unbind(dim)
    assert len(pieces) == bs[d]
    for i, piece in enumerate(pieces):
        assert_matches(piece, {k: v.unbind(d)[i] for k, v in ref.leaves.items()}, bs[:d] + bs[d + 1 :])
    if bs[d] == 0:
        return
    if data.draw(st.booleans()):
        split = data.draw(st.integers(1, 4))
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, bs[d]), max_size=2)))
        bounds = [0] + cuts + [bs[d]]
        split = [b - a for a, b in zip(bounds, bounds[1:])]
    pieces = td.split(split, dim)
    ref_pieces = {k: v.split(split, d) for k, v in ref.leaves.items()}
    lengths = [p.shape[d] for p in torch.zeros(bs).split(split, d)]
    assert len(pieces) == len(lengths)
    for i, (piece, length) in enumerate(zip(pieces, lengths)):
        assert_matches(piece, {k: v[i] for k, v in ref_pieces.items()}, bs[:d] + (length,) + bs[d + 1 :])


def _reshapes(bs: tuple) -> list:
    numel = torch.Size(bs).numel()
    shapes = [(numel,), (1, numel), (numel, 1), bs[::-1], bs + (1,), (1,) + bs]
    if numel % 2 == 0 and numel:
        shapes += [(2, numel // 2), (numel // 2, 2, 1)]
    return shapes


@FAST
@given(data=st.data())
def test_reshape_permute_flatten_match_per_leaf(data):
    td, ref, bs, _ = data.draw(td_and_ref(extra_dims=False))
    n = len(bs)
    new = data.draw(st.sampled_from(_reshapes(bs)))
    assert_matches(td.reshape(*new), {k: v.reshape(new + v.shape[n:]) for k, v in ref.leaves.items()}, new)
    assert_matches(
        td.reshape(-1), {k: v.reshape((-1,) + v.shape[n:]) for k, v in ref.leaves.items()}, (torch.Size(bs).numel(),)
    )
    perm = tuple(data.draw(st.permutations(range(n))))
    assert_matches(
        td.permute(*perm),
        {k: v.permute(perm + tuple(range(n, v.dim()))) for k, v in ref.leaves.items()},
        tuple(bs[p] for p in perm),
    )
    if n:
        start = data.draw(st.integers(-n, n - 1))
        end = data.draw(st.integers(_norm(start, n), n - 1))
        s, e = _norm(start, n), end
        flat_bs = bs[:s] + (torch.Size(bs[s : e + 1]).numel(),) + bs[e + 1 :]
        assert_matches(td.flatten(start, end), {k: v.flatten(s, e) for k, v in ref.leaves.items()}, flat_bs)


@FAST
@given(data=st.data())
def test_unsqueeze_squeeze_match_per_leaf(data):
    td, ref, bs, _ = data.draw(td_and_ref())
    n = len(bs)
    dim = data.draw(st.integers(-n - 1, n))
    d = _norm(dim, n + 1)
    up = td.unsqueeze(dim)
    assert_matches(up, {k: v.unsqueeze(d) for k, v in ref.leaves.items()}, bs[:d] + (1,) + bs[d:], ref.nodes)
    # squeeze() drops size-1 *batch* dims only, never a leaf's feature dims
    ones = tuple(i for i, s in enumerate(bs) if s == 1)
    assert_matches(
        td.squeeze(),
        {k: v.squeeze(ones) if ones else v for k, v in ref.leaves.items()},
        tuple(s for s in bs if s != 1),
        ref.nodes,
    )
    if n:
        sq = data.draw(st.integers(-n, n - 1))
        s = _norm(sq, n)
        expected_bs = bs[:s] + bs[s + 1 :] if bs[s] == 1 else bs
        assert_matches(
            td.squeeze(sq), {k: v.squeeze(s) if bs[s] == 1 else v for k, v in ref.leaves.items()}, expected_bs
        )


@FAST
@given(data=st.data())
def test_expand_matches_per_leaf(data):
    td, ref, bs, _ = data.draw(td_and_ref())
    n = len(bs)
    lead = tuple(data.draw(st.lists(st.integers(0, 2), max_size=2)))
    grown = tuple(data.draw(st.integers(1, 3)) if s == 1 else s for s in bs)
    new = lead + grown
    out = td.expand(*new)
    assert_matches(out, {k: v.expand(new + v.shape[n:]) for k, v in ref.leaves.items()}, new)


@FAST
@given(data=st.data())
def test_clone_and_apply_match_per_leaf(data):
    td, ref, bs, _ = data.draw(td_and_ref())
    copy = td.clone()
    assert_matches(copy, ref.leaves, bs, ref.nodes)
    for key, leaf in copy.items(True, True):
        if leaf.numel():
            assert leaf.untyped_storage().data_ptr() != ref.leaves[key].untyped_storage().data_ptr(), key
    copy.apply_(_changed)
    assert_matches(td, ref.leaves, bs)  # the original is untouched

    def fn(t):
        return t.to(torch.float64) * 2 + 1

    assert_matches(td.apply(fn), {k: fn(v) for k, v in ref.leaves.items()}, bs, ref.nodes)
    pairs = td.apply(lambda x, y: x.to(torch.float64) - y.to(torch.float64), copy)
    assert_matches(pairs, {k: v.to(torch.float64) - _changed(v).to(torch.float64) for k, v in ref.leaves.items()}, bs)


# --------------------------------------------------------------------------- keys and dict-like API
def spec_keys(spec: dict, prefix: tuple = ()) -> tuple[list, list]:
    """(all nested keys, leaf keys) of ``spec``, top-level keys as strings."""
    every, leaves = [], []
    for key, (kind, _, sub) in spec.items():
        path = prefix + (key,)
        every.append(_key(path))
        if kind == "leaf":
            leaves.append(_key(path))
        else:
            sub_every, sub_leaves = spec_keys(sub, path)
            every += sub_every
            leaves += sub_leaves
    return every, leaves


@SLOW
@given(data=st.data())
def test_keys_match_reference_structure(data):
    td, ref, bs, spec = data.draw(td_and_ref())
    every, leaves = spec_keys(spec)
    assert list(td.keys()) == list(spec)
    assert set(td.keys(True)) == set(every) and len(list(td.keys(True))) == len(every)
    assert set(td.keys(True, True)) == set(leaves) and len(td.keys(True, True)) == len(leaves)
    assert set(td.keys(False, True)) == {k for k in spec if spec[k][0] == "leaf"}
    for key in every:
        assert key in td
        assert key in td.keys(True)
        assert (key in td.keys(True, True)) == (key in leaves)
    assert ("zz",) not in td and "zz" not in td and ("zz", "y") not in td.keys(True)
    for key in every:  # a path below a leaf does not exist
        if key in leaves:
            below = ((key,) if isinstance(key, str) else key) + ("zz",)
            assert below not in td


def test_keys_view_contains_path_below_a_leaf():
    td = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
    assert ("a", "zz") not in td.keys(True)


@FAST
@given(data=st.data())
def test_get_set_del_pop_round_trip(data):
    td, ref, bs, spec = data.draw(td_and_ref())
    for key, leaf in ref.leaves.items():
        assert td.get(key) is leaf
        assert td[key] is leaf
    with pytest.raises(KeyError, match="zz"):
        td.get(("zz", "y"))
    assert td.get("zz", None) is None

    # a new nested key creates the path; deleting it again restores the structure
    new = torch.zeros(bs + (2,))
    td.set(("zz", "y", "x"), new)
    assert td.get(("zz", "y", "x")) is new and td["zz"].batch_size == torch.Size(bs)
    del td["zz", "y", "x"]
    assert ("zz", "y", "x") not in td and ("zz", "y") in td
    del td["zz"]
    assert set(td.keys(True)) == set(spec_keys(spec)[0])

    if not ref.leaves:
        return
    key = data.draw(st.sampled_from(sorted(ref.leaves, key=str)))
    popped = td.pop(key)
    assert popped is ref.leaves[key] and key not in td
    assert td.pop(key, "default") == "default"
    td.set(key, popped)
    assert_matches(td, ref.leaves, bs)


@FAST
@given(data=st.data())
def test_select_exclude_partition_the_leaves(data):
    td, ref, bs, spec = data.draw(td_and_ref())
    every, _ = spec_keys(spec)
    chosen = data.draw(st.lists(st.sampled_from(every), max_size=3, unique=True))

    def under(leaf_key) -> bool:
        leaf = (leaf_key,) if isinstance(leaf_key, str) else leaf_key
        return any(leaf[: len(c)] == c for c in ((c,) if isinstance(c, str) else c for c in chosen))

    picked = td.select(*chosen)
    dropped = td.exclude(*chosen)
    assert_matches(picked, {k: v for k, v in ref.leaves.items() if under(k)}, bs)
    assert_matches(dropped, {k: v for k, v in ref.leaves.items() if not under(k)}, bs)
    assert_matches(td, ref.leaves, bs)  # neither touched the source


def _merge(dest: dict, src: dict) -> dict:
    """Reference ``update``: recursive merge of nested dicts, ``src`` wins on conflicts."""
    out = dict(dest)
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _nested(td: TensorDict) -> dict:
    return {k: _nested(v) if isinstance(v, TensorDict) else v for k, v in td.items()}


def _flat(tree: dict, prefix: tuple = ()) -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, prefix + (key,)))
        else:
            out[_key(prefix + (key,))] = value
    return out


@FAST
@given(data=st.data())
def test_update_matches_dict_merge(data):
    bs = data.draw(batch_sizes)
    td, _ = build(data.draw(specs(extra_dims=False)), bs)
    other, _ = build(data.draw(specs(extra_dims=False)), bs, start=10_000)
    expected = _flat(_merge(_nested(td), _nested(other)))
    td.update(other)
    assert_matches(td, expected, bs)


@FAST
@given(data=st.data())
def test_flatten_unflatten_keys_round_trip(data):
    td, ref, bs, _ = data.draw(td_and_ref(extra_dims=False))
    flat = td.flatten_keys(".")
    names = {(k if isinstance(k, str) else ".".join(k)): v for k, v in ref.leaves.items()}
    assert set(flat.keys()) == set(names)
    for name, leaf in names.items():
        assert flat.get(name) is leaf
    assert_matches(flat.unflatten_keys("."), ref.leaves, bs)
    assert_matches(td, ref.leaves, bs)
