"""Tests for tdict.memmap.MemoryMappedTensor."""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import pickle
import uuid

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tdict.memmap import MemoryMappedTensor

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    if not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        low, high = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
        return torch.randint(low, high, shape, generator=g).to(dtype)
    draw_dtype = dtype if dtype.is_complex else torch.float64
    return torch.randn(shape, generator=g, dtype=draw_dtype).to(dtype)


def _read_back(path, dtype, shape):
    """Read the file without the class under test: raw bytes → tensor."""
    raw = open(path, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_from_tensor_roundtrip_each_dtype(tmp_path, dtype):
    src = _sample((3, 5), dtype)
    path = tmp_path / "t.memmap"
    t = MemoryMappedTensor.from_tensor(src, filename=path)
    assert type(t) is MemoryMappedTensor
    assert t.shape == (3, 5) and t.dtype == dtype
    assert t.filename == str(path)
    assert os.path.getsize(path) == 15 * dtype.itemsize
    assert torch.equal(t, src)
    # the file itself holds the data ...
    assert torch.equal(_read_back(path, dtype, (3, 5)), src)
    # ... and reopening maps it
    r = MemoryMappedTensor.from_filename(path, dtype, (3, 5))
    assert type(r) is MemoryMappedTensor and r.filename == str(path)
    assert torch.equal(r, src)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_anonymous_roundtrip_each_dtype(dtype):
    src = _sample((4,), dtype)
    t = MemoryMappedTensor.from_tensor(src)
    assert t.filename is None
    assert t.is_shared()
    assert torch.equal(t, src)
    expected = src.clone()
    src.fill_(1)  # t is a copy, not an alias of the input
    assert torch.equal(t, expected)


def test_from_tensor_noncontiguous_and_grad(tmp_path):
    src = torch.arange(12.0).view(3, 4).t().requires_grad_()
    t = MemoryMappedTensor.from_tensor(src, filename=tmp_path / "a")
    assert t.shape == (4, 3) and t.is_contiguous() and not t.requires_grad
    assert torch.equal(t, src.detach())


def test_from_tensor_copy_data_false(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.ones(3), filename=tmp_path / "a", copy_data=False)
    assert torch.equal(t, torch.zeros(3))


def test_from_tensor_existing_memmap(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "a")
    assert MemoryMappedTensor.from_tensor(t, filename=tmp_path / "a") is t
    anon = MemoryMappedTensor.from_tensor(torch.arange(3))
    assert MemoryMappedTensor.from_tensor(anon) is anon
    with pytest.raises(RuntimeError, match="copy_existing"):
        MemoryMappedTensor.from_tensor(t, filename=tmp_path / "b")
    b = MemoryMappedTensor.from_tensor(t, filename=tmp_path / "b", copy_existing=True)
    assert b.filename == str(tmp_path / "b") and torch.equal(b, t)
    c = MemoryMappedTensor.from_tensor(t)  # file-backed -> anonymous copy
    assert c.filename is None and torch.equal(c, t)


def test_constructor_dispatch(tmp_path):
    t = MemoryMappedTensor(torch.arange(4), filename=tmp_path / "a")
    assert type(t) is MemoryMappedTensor and t.tolist() == [0, 1, 2, 3]
    r = MemoryMappedTensor(tmp_path / "a", dtype=torch.int64, shape=(2, 2))
    assert r.tolist() == [[0, 1], [2, 3]]
    s = MemoryMappedTensor(t.untyped_storage(), dtype=torch.int64, shape=(4,))
    assert s.tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------- factories


@pytest.mark.parametrize("shape_args", [(2, 3), ((2, 3),), ([2, 3],), (torch.Size([2, 3]),)])
def test_empty_shape_forms(tmp_path, shape_args):
    t = MemoryMappedTensor.empty(*shape_args, dtype=torch.int32, filename=tmp_path / "e")
    assert t.shape == (2, 3) and t.dtype == torch.int32
    assert os.path.getsize(tmp_path / "e") == 24


def test_zeros_ones_full(tmp_path):
    z = MemoryMappedTensor.zeros(2, 2, filename=tmp_path / "z")
    assert z.dtype == torch.get_default_dtype() and torch.equal(z, torch.zeros(2, 2))
    o = MemoryMappedTensor.ones((3,), dtype=torch.bool, filename=tmp_path / "o")
    assert o.tolist() == [True, True, True]
    f = MemoryMappedTensor.full((2, 2), 7, dtype=torch.int64, filename=tmp_path / "f")
    assert f.dtype == torch.int64 and f.tolist() == [[7, 7], [7, 7]]
    assert MemoryMappedTensor.full(2, 1.5).tolist() == [1.5, 1.5]
    # as in tensordict, dtype defaults to the default dtype whatever the fill value (not torch.full's inference)
    assert MemoryMappedTensor.full([2], True).dtype == torch.get_default_dtype()
    assert MemoryMappedTensor.full([2], 7).dtype == torch.get_default_dtype()
    assert torch.equal(_read_back(tmp_path / "f", torch.int64, (2, 2)), torch.full((2, 2), 7))
    with pytest.raises(TypeError, match="fill_value"):
        MemoryMappedTensor.full((2,), "x", dtype=torch.float32, filename=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_like_factories(tmp_path):
    ref = torch.zeros(2, 3, dtype=torch.int16)
    e = MemoryMappedTensor.empty_like(ref, filename=tmp_path / "e")
    assert e.shape == (2, 3) and e.dtype == torch.int16 and e.filename == str(tmp_path / "e")
    assert torch.equal(MemoryMappedTensor.zeros_like(ref), ref)
    ones = MemoryMappedTensor.ones_like(ref, dtype=torch.float64)
    assert torch.equal(ones, torch.ones(2, 3, dtype=torch.float64))
    f = MemoryMappedTensor.full_like(ref, 5, filename=tmp_path / "f")
    assert f.dtype == torch.int16 and torch.equal(f, torch.full((2, 3), 5, dtype=torch.int16))


def test_zeros_overwrites_reused_file(tmp_path):
    MemoryMappedTensor.full((4,), 3.0, filename=tmp_path / "a")
    z = MemoryMappedTensor.zeros(4, filename=tmp_path / "a", existsok=True)
    assert torch.equal(z, torch.zeros(4))
    assert torch.equal(_read_back(tmp_path / "a", torch.float32, (4,)), torch.zeros(4))


def test_from_storage():
    storage = torch.arange(6, dtype=torch.int32).untyped_storage()
    t = MemoryMappedTensor.from_storage(storage, dtype=torch.int32, shape=(2, 3))
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]] and t.filename is None
    assert MemoryMappedTensor.from_storage(storage, dtype=torch.int32).shape == (6,)
    with pytest.raises(ValueError, match="expected at least 28 bytes, found 24"):
        MemoryMappedTensor.from_storage(storage, dtype=torch.int32, shape=(7,))


# --------------------------------------------------------------------------- views & writes


def test_writes_through_slices_hit_file(tmp_path):
    path = tmp_path / "w"
    t = MemoryMappedTensor.zeros(4, 3, dtype=torch.float32, filename=path)
    row = t[1]
    assert type(row) is MemoryMappedTensor and row.filename == str(path)
    row.fill_(1.0)
    t[2:, 0] = 5.0
    t.T[2, 0] = -3.0  # t[0, 2]
    col = t.narrow(1, 1, 1).squeeze(1)
    col[3] = 9.0
    for part in t.split(2):
        assert type(part) is MemoryMappedTensor
    t.unbind(0)[0][1] = 4.0
    t.add_(0.5)  # in-place returns the memmap itself
    expected = torch.zeros(4, 3)
    expected[1] = 1.0
    expected[2:, 0] = 5.0
    expected[0, 2] = -3.0
    expected[3, 1] = 9.0
    expected[0, 1] = 4.0
    expected += 0.5
    assert torch.equal(t, expected)
    assert torch.equal(_read_back(path, torch.float32, (4, 3)), expected)
    assert torch.equal(MemoryMappedTensor.from_filename(path, torch.float32, (4, 3)), expected)


def test_view_ops_keep_type_copies_do_not(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.arange(12.0).view(3, 4), filename=tmp_path / "v")
    for view in (
        t[0],
        t[:, 1:],
        t[None],
        t[..., 0],
        t.view(-1),
        t.reshape(4, 3),
        t.permute(1, 0),
        t.transpose(0, 1),
        t.unsqueeze(0),
        t.flatten(),
        t.expand(2, 3, 4),
        t.T,
        t.detach(),
        t.view(torch.int32),
        t[1, 2],
    ):
        assert type(view) is MemoryMappedTensor, view
        assert view.filename == str(tmp_path / "v")
    assert [type(r) for r in t] == [MemoryMappedTensor] * 3
    # results that own new memory are plain tensors
    for plain in (
        t + 1,
        t * t,
        t.clone(),
        t.sum(),
        t[[0, 2]],
        t[t > 3],
        t.T.reshape(-1),
        t.T.contiguous(),
        torch.cat([t, t]),
        t.to(torch.float64),
        torch.stack([t, t]),
    ):
        assert type(plain) is torch.Tensor, plain
    assert torch.equal(t + 1, torch.arange(12.0).view(3, 4) + 1)


def test_clone_is_plain_ram_copy(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.arange(4.0), filename=tmp_path / "c")
    c = t.clone()
    assert type(c) is torch.Tensor and not c.is_shared()
    c[0] = 100.0
    assert t[0].item() == 0.0
    d = copy.deepcopy(t)
    assert type(d) is torch.Tensor and torch.equal(d, t)


# --------------------------------------------------------------------------- edge shapes


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2, 5)])
def test_zero_element(tmp_path, shape):
    path = tmp_path / "z"
    t = MemoryMappedTensor.empty(shape, dtype=torch.float32, filename=path)
    assert t.shape == shape and t.numel() == 0 and t.filename == str(path)
    assert path.exists() and os.path.getsize(path) == 0
    f = MemoryMappedTensor.from_tensor(torch.zeros(shape), filename=tmp_path / "f")
    assert f.shape == shape
    r = MemoryMappedTensor.from_filename(path, torch.float32, shape)
    assert type(r) is MemoryMappedTensor and r.shape == shape
    p = pickle.loads(pickle.dumps(t))
    assert type(p) is MemoryMappedTensor and p.shape == shape and p.filename == str(path)
    a = MemoryMappedTensor.zeros(shape)
    assert a.shape == shape and a.filename is None
    assert pickle.loads(pickle.dumps(a)).shape == shape


def test_zero_dim(tmp_path):
    path = tmp_path / "s"
    t = MemoryMappedTensor.from_tensor(torch.tensor(2.5, dtype=torch.float64), filename=path)
    assert t.shape == () and t.item() == 2.5
    assert os.path.getsize(path) == 8
    t.fill_(-1.0)
    r = MemoryMappedTensor.from_filename(path, torch.float64, ())
    assert r.shape == () and r.item() == -1.0
    assert MemoryMappedTensor.full((), 3).item() == 3
    elem = MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "v")[1]
    assert type(elem) is MemoryMappedTensor and elem.shape == () and elem.item() == 1


# --------------------------------------------------------------------------- errors


def test_existsok(tmp_path):
    path = tmp_path / "x"
    MemoryMappedTensor.from_tensor(torch.arange(3), filename=path)
    with pytest.raises(FileExistsError, match="existsok") as info:
        MemoryMappedTensor.from_tensor(torch.arange(3) + 10, filename=path)
    assert str(path) in str(info.value)
    with pytest.raises(FileExistsError):
        MemoryMappedTensor.zeros(3, filename=path)
    # nothing was overwritten by the failed calls
    assert _read_back(path, torch.int64, (3,)).tolist() == [0, 1, 2]
    t = MemoryMappedTensor.from_tensor(torch.arange(5) + 10, filename=path, existsok=True)
    assert t.tolist() == [10, 11, 12, 13, 14]
    assert os.path.getsize(path) == 40  # resized to the new tensor


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
@pytest.mark.parametrize("make", ["from_tensor", "zeros", "empty_like"])
def test_a_symlink_filename_is_refused_not_written_through(tmp_path, make):
    target = tmp_path / "precious.bin"
    target.write_bytes(b"precious")
    link = tmp_path / "data.memmap"
    link.symlink_to(target)
    src = torch.arange(4)
    build = {
        "from_tensor": lambda: MemoryMappedTensor.from_tensor(src, filename=link, existsok=True),
        "zeros": lambda: MemoryMappedTensor.zeros(4, filename=link, existsok=True),
        "empty_like": lambda: MemoryMappedTensor.empty_like(src, filename=link, existsok=True),
    }[make]
    # tensordict 0.14 refuses too ("Refusing to write memory-mapped tensor through symlink")
    with pytest.raises(FileExistsError, match=r"data\.memmap.*symbolic link.*precious\.bin"):
        build()
    assert target.read_bytes() == b"precious" and link.is_symlink()
    target.unlink()  # a dangling link: its target is not created either
    with pytest.raises(FileExistsError, match="symbolic link"):
        build()
    assert not target.exists()


def test_from_filename_errors(tmp_path):
    path = tmp_path / "x"
    MemoryMappedTensor.from_tensor(torch.zeros(4, dtype=torch.float32), filename=path)
    with pytest.raises(ValueError, match=r"expected 32 bytes, found 16") as info:
        MemoryMappedTensor.from_filename(path, torch.float64, (4,))
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match=r"expected 12 bytes, found 16"):
        MemoryMappedTensor.from_filename(path, torch.float32, (3,))
    with pytest.raises(FileNotFoundError, match="missing"):
        MemoryMappedTensor.from_filename(tmp_path / "missing", torch.float32, (3,))
    with pytest.raises(TypeError, match="dtype"):
        MemoryMappedTensor.from_filename(path, "float32", (4,))  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="shape"):
        MemoryMappedTensor.from_filename(path, torch.float32, (4.0,))  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="shape"):
        MemoryMappedTensor.empty(-1, 2)
    part = MemoryMappedTensor.from_filename(path, torch.float32, (4,), index=slice(1, 3))
    assert type(part) is MemoryMappedTensor and part.shape == (2,)


def test_input_type_error():
    with pytest.raises(TypeError, match="input must be a torch.Tensor, got list"):
        MemoryMappedTensor.from_tensor([1, 2, 3])  # pyright: ignore[reportArgumentType]


# --------------------------------------------------------------------------- pickling


def test_pickle_file_backed_reopens_file(tmp_path):
    t = MemoryMappedTensor.from_tensor(torch.arange(12.0).view(3, 4), filename=tmp_path / "p")
    blob = pickle.dumps(t[1:, ::2])
    assert len(blob) < 400  # a reference to the file, not the data
    v = pickle.loads(blob)
    assert type(v) is MemoryMappedTensor and v.filename == t.filename
    assert torch.equal(v, t[1:, ::2])
    v[0, 1] = -7.0  # -> t[1, 2]
    assert t[1, 2].item() == -7.0
    assert torch.equal(copy.copy(t), t)


def test_pickle_anonymous_by_value():
    t = MemoryMappedTensor.from_tensor(torch.arange(3))
    p = pickle.loads(pickle.dumps(t))
    assert type(p) is MemoryMappedTensor and p.filename is None and p.is_shared()
    assert p.tolist() == [0, 1, 2]
    p[0] = 9
    assert t[0].item() == 0  # plain pickle copies anonymous tensors


def test_spawn_child_writes_are_visible(tmp_path):
    t = MemoryMappedTensor.zeros(3, 2, filename=tmp_path / "shared")
    anon = MemoryMappedTensor.zeros(4, dtype=torch.int32)
    # The child's target must be importable whatever pytest's import mode, so it is a torch
    # builtin: the child unpickles the three destinations (reopening the file / attaching the
    # shared memory) and copies into them.
    dst = [t[0], t[1:][1], anon]  # a row, a row of a view with an offset, an anonymous tensor
    src = [
        torch.tensor([42.0, 1.0]),
        torch.tensor([-1.0, -2.0]),
        torch.full((4,), 7, dtype=torch.int32),
    ]
    proc = mp.get_context("spawn").Process(target=torch._foreach_copy_, args=(dst, src))  # pyright: ignore[reportPrivateImportUsage]
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert t.tolist() == [[42.0, 1.0], [0.0, 0.0], [-1.0, -2.0]]
    assert anon.tolist() == [7, 7, 7, 7]
    assert _read_back(tmp_path / "shared", torch.float32, (3, 2)).tolist() == t.tolist()


def test_flush(tmp_path):
    t = MemoryMappedTensor.ones(3, filename=tmp_path / "f")
    t.flush()
    MemoryMappedTensor.ones(3).flush()  # anonymous: no-op
    assert _read_back(tmp_path / "f", torch.float32, (3,)).tolist() == [1.0, 1.0, 1.0]


# --------------------------------------------------------------------------- property test


@settings(
    max_examples=40,
    deadline=None,
    # tmp_path is shared by the examples; each one writes a uniquely named file
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=4),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_property_roundtrip(tmp_path, shape, dtype, seed):
    src = _sample(tuple(shape), dtype, seed)
    path = tmp_path / f"{uuid.uuid4().hex}.memmap"
    t = MemoryMappedTensor.from_tensor(src, filename=path)
    assert t.shape == src.shape and t.dtype == dtype
    assert os.path.getsize(path) == src.numel() * dtype.itemsize
    r = MemoryMappedTensor.from_filename(path, dtype, shape)
    assert r.shape == src.shape and torch.equal(r, src)
    p = pickle.loads(pickle.dumps(t))
    assert torch.equal(p, src) and p.filename == str(path)
    anon = MemoryMappedTensor.from_tensor(src)
    assert torch.equal(pickle.loads(pickle.dumps(anon)), src)
