"""MemoryMappedTensor factories: the argument forms tensordict 0.14 accepts (and refuses).

Reference behaviour (tensordict 0.14.3):

* ``empty/zeros/ones/full`` take the shape as ints, one sequence or ``shape=``; no shape at all is
  a ``TypeError``; ``full`` takes ``fill_value=`` (we also take ``torch.full``'s positional form).
* ``dtype`` defaults to ``torch.get_default_dtype()``, for ``full`` too.
* ``device`` may be ``None`` or a CPU device; any other device raises ``RuntimeError`` from the
  factories and ``ValueError`` from the class (ours raises one error that is both), and no file
  is created or touched.
* an existing ``filename`` raises ``RuntimeError`` ("already exists") unless ``existsok=True``.
"""

from __future__ import annotations

import os

import pytest
import torch

from tdict.memmap import MemoryMappedTensor

FACTORIES = {
    "empty": (MemoryMappedTensor.empty, None),
    "zeros": (MemoryMappedTensor.zeros, 0),
    "ones": (MemoryMappedTensor.ones, 1),
    "full": (lambda *a, **k: MemoryMappedTensor.full(*a, fill_value=3, **k), 3),
}
SHAPE_FORMS = {
    "ints": lambda s: ((*s,), {}),
    "tuple": lambda s: ((tuple(s),), {}),
    "list": lambda s: ((list(s),), {}),
    "size": lambda s: ((torch.Size(s),), {}),
    "kw_tuple": lambda s: ((), {"shape": tuple(s)}),
    "kw_list": lambda s: ((), {"shape": list(s)}),
    "kw_size": lambda s: ((), {"shape": torch.Size(s)}),
}


def _read_back(path, dtype, shape):
    """The file's bytes as a tensor, without the class under test."""
    raw = open(path, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


@pytest.mark.parametrize("on_disk", [True, False], ids=["file", "anon"])
@pytest.mark.parametrize("form", list(SHAPE_FORMS))
@pytest.mark.parametrize("name", list(FACTORIES))
@pytest.mark.parametrize("dtype", [None, torch.float64, torch.int32])
def test_shape_forms_values_and_dtype(tmp_path, name, form, on_disk, dtype):
    make, value = FACTORIES[name]
    shape = (3, 4)
    args, kwargs = SHAPE_FORMS[form](shape)
    path = tmp_path / "t.memmap" if on_disk else None
    t = make(*args, dtype=dtype, device="cpu", filename=path, **kwargs)
    expected_dtype = dtype or torch.get_default_dtype()
    assert type(t) is MemoryMappedTensor
    assert t.shape == shape and t.dtype == expected_dtype and t.device == torch.device("cpu")
    if value is not None:
        assert torch.equal(t, torch.full(shape, value, dtype=expected_dtype))
    if path is not None:
        assert t.filename == str(path)
        assert os.path.getsize(path) == 12 * expected_dtype.itemsize
        if value is not None:
            assert torch.equal(_read_back(path, expected_dtype, shape), torch.full(shape, value, dtype=expected_dtype))
    else:
        assert t.filename is None and t.is_shared()


@pytest.mark.parametrize("name", list(FACTORIES))
def test_zero_dim_and_int_shape_keyword(tmp_path, name):
    make, value = FACTORIES[name]
    for t in (make(()), make(shape=()), make(torch.Size([]))):
        assert t.shape == () and t.numel() == 1
        if value is not None:
            assert t.item() == value
    t = make(shape=5, filename=tmp_path / "five")
    assert t.shape == (5,) and os.path.getsize(tmp_path / "five") == 5 * torch.get_default_dtype().itemsize


@pytest.mark.parametrize("name", list(FACTORIES))
def test_missing_or_doubled_shape_is_a_type_error_and_creates_nothing(tmp_path, name):
    make, _ = FACTORIES[name]
    path = tmp_path / "none.memmap"
    with pytest.raises(TypeError, match=rf"{name}\(\) needs a shape"):
        make(dtype=torch.float32, filename=path)
    with pytest.raises(TypeError, match=r"shape twice.*\(2,\).*shape=\(3,\)"):
        make(2, shape=(3,), filename=path)
    with pytest.raises(TypeError, match="shape must contain ints, got float"):
        make(shape=(2.0,), filename=path)
    with pytest.raises(ValueError, match="non-negative"):
        make(2, -1, filename=path)
    assert not path.exists()


@pytest.mark.parametrize("device", [None, "cpu", "cpu:0", torch.device("cpu")], ids=str)
@pytest.mark.parametrize("name", list(FACTORIES))
def test_cpu_devices_are_accepted(name, device):
    make, _ = FACTORIES[name]
    t = make(2, 3, device=device)
    assert t.device == torch.device("cpu") and t.shape == (2, 3)


@pytest.mark.parametrize("device", ["meta", "cuda", "cuda:1", torch.device("meta"), 0, "nonsense"], ids=str)
@pytest.mark.parametrize("name", list(FACTORIES))
def test_other_devices_are_refused_before_any_file_is_touched(tmp_path, name, device):
    make, _ = FACTORIES[name]
    new = tmp_path / "new.memmap"
    with pytest.raises(RuntimeError, match=r"device must be None or 'cpu', got") as info:
        make(2, 3, device=device, filename=new)
    assert isinstance(info.value, ValueError)  # the class raises ValueError in tensordict: one error serves both
    assert repr(device) in str(info.value)
    assert not new.exists()
    # an existing file reused with existsok=True is neither resized nor rewritten
    old = tmp_path / "old.memmap"
    MemoryMappedTensor.from_tensor(torch.arange(4, dtype=torch.int32), filename=old)
    with pytest.raises(RuntimeError, match="device"):
        make(8, device=device, filename=old, existsok=True)
    assert _read_back(old, torch.int32, (4,)).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("device", [1.5, ["cpu"], True], ids=repr)
def test_device_of_the_wrong_type_is_a_type_error(device):
    with pytest.raises(TypeError, match=r"device must be None, a str, an int or a torch\.device, got"):
        MemoryMappedTensor.zeros(2, device=device)


def test_full_argument_forms(tmp_path):
    default = torch.get_default_dtype()
    cases = {
        "varargs": MemoryMappedTensor.full(2, 3, fill_value=7),
        "tuple": MemoryMappedTensor.full((2, 3), fill_value=7),
        "shape_kw": MemoryMappedTensor.full(shape=(2, 3), fill_value=7),
        "torch_order": MemoryMappedTensor.full((2, 3), 7),
        "fill_positional_with_shape_kw": MemoryMappedTensor.full(7, shape=(2, 3)),
    }
    for name, t in cases.items():
        assert t.shape == (2, 3) and t.dtype == default, name
        assert torch.equal(t, torch.full((2, 3), 7.0, dtype=default)), name
    assert MemoryMappedTensor.full(2, 1.5).tolist() == [1.5, 1.5]  # full(shape, fill): shape (2,)
    t = MemoryMappedTensor.full((2,), fill_value=True, dtype=torch.bool, filename=tmp_path / "b")
    assert t.dtype == torch.bool and _read_back(tmp_path / "b", torch.bool, (2,)).tolist() == [True, True]
    t = MemoryMappedTensor.full(shape=[3], fill_value=torch.tensor(-2), dtype=torch.int16)
    assert t.dtype == torch.int16 and t.tolist() == [-2, -2, -2]


def test_full_bad_fill_value_creates_nothing(tmp_path):
    path = tmp_path / "f.memmap"
    with pytest.raises(TypeError, match="full\\(\\) needs fill_value"):
        MemoryMappedTensor.full(2, 3, 4, filename=path)
    with pytest.raises(TypeError, match="full\\(\\) needs fill_value"):
        MemoryMappedTensor.full(shape=(2,), filename=path)
    with pytest.raises(TypeError, match="fill_value must be a number or a one-element tensor, got str"):
        MemoryMappedTensor.full((2,), fill_value="x", filename=path)
    with pytest.raises(ValueError, match=r"fill_value \(1\+2j\) cannot be stored as torch.float32"):
        MemoryMappedTensor.full((2,), fill_value=1 + 2j, dtype=torch.float32, filename=path)
    with pytest.raises(ValueError, match="cannot be stored as torch.int8"):
        MemoryMappedTensor.full((2,), fill_value=1000, dtype=torch.int8, filename=path)
    assert not path.exists()


def test_existing_file_error_is_also_a_runtime_error(tmp_path):
    path = tmp_path / "x.memmap"
    MemoryMappedTensor.full((3,), fill_value=5, dtype=torch.int64, filename=path)
    for make in (
        lambda: MemoryMappedTensor.zeros(3, filename=path),
        lambda: MemoryMappedTensor.empty(shape=(4,), filename=path),
        lambda: MemoryMappedTensor.ones_like(torch.zeros(2), filename=path),
        lambda: MemoryMappedTensor.from_tensor(torch.zeros(2), filename=path),
    ):
        with pytest.raises(RuntimeError, match="already exists") as info:  # tensordict's type
            make()
        assert isinstance(info.value, FileExistsError)
    assert _read_back(path, torch.int64, (3,)).tolist() == [5, 5, 5]
    t = MemoryMappedTensor.zeros(shape=(2, 2), dtype=torch.int64, filename=path, existsok=True)
    assert t.tolist() == [[0, 0], [0, 0]]
    assert _read_back(path, torch.int64, (2, 2)).tolist() == [[0, 0], [0, 0]] and os.path.getsize(path) == 32


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_symlink_error_matches_tensordicts_wording(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"unchanged")
    link = tmp_path / "link.memmap"
    link.symlink_to(target)
    with pytest.raises(RuntimeError, match="through symlink"):
        MemoryMappedTensor.zeros(shape=(2,), filename=link, existsok=True)
    assert target.read_bytes() == b"unchanged"


def test_like_factories_take_device_and_check_input(tmp_path):
    ref = torch.arange(6, dtype=torch.int16).view(2, 3)
    f = MemoryMappedTensor.full_like(ref, fill_value=4, device="cpu", filename=tmp_path / "f")
    assert f.dtype == torch.int16 and torch.equal(f, torch.full((2, 3), 4, dtype=torch.int16))
    assert torch.equal(_read_back(tmp_path / "f", torch.int16, (2, 3)), torch.full((2, 3), 4, dtype=torch.int16))
    z = MemoryMappedTensor.zeros_like(ref, dtype=torch.float64)
    assert z.dtype == torch.float64 and torch.equal(z, torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="device must be None or 'cpu'"):
        MemoryMappedTensor.ones_like(ref, device="meta", filename=tmp_path / "o")
    with pytest.raises(TypeError, match="empty_like: input must be a torch.Tensor, got list"):
        MemoryMappedTensor.empty_like([1, 2], filename=tmp_path / "o")  # pyright: ignore[reportArgumentType]
    assert not (tmp_path / "o").exists()


def test_from_tensor_shape_broadcasts_the_input(tmp_path):
    src = torch.arange(3, dtype=torch.int32)
    t = MemoryMappedTensor.from_tensor(src, shape=(2, 3), filename=tmp_path / "b")
    assert t.shape == (2, 3) and t.dtype == torch.int32
    assert torch.equal(t, src.expand(2, 3))
    assert torch.equal(_read_back(tmp_path / "b", torch.int32, (2, 3)), src.expand(2, 3))
    e = MemoryMappedTensor.from_tensor(src, shape=(5, 7), copy_data=False)
    assert e.shape == (5, 7) and e.dtype == torch.int32
    with pytest.raises(ValueError, match=r"shape=\(6,\) cannot hold input of shape \(2, 3\)"):
        MemoryMappedTensor.from_tensor(torch.zeros(2, 3), shape=(6,), filename=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_class_call_takes_device_index_and_data(tmp_path):
    t = MemoryMappedTensor([3, 4], device="cpu")  # tensordict reads a list as torch.Tensor(list) does
    assert type(t) is MemoryMappedTensor and t.dtype == torch.get_default_dtype() and t.tolist() == [3.0, 4.0]
    assert MemoryMappedTensor([1, 2], dtype=torch.int8).dtype == torch.int8
    with pytest.raises(ValueError, match="device must be None or 'cpu'"):  # tensordict: ValueError here
        MemoryMappedTensor([3, 4], device="meta")
    row = MemoryMappedTensor(torch.arange(6).view(2, 3), index=1)
    assert type(row) is MemoryMappedTensor and row.tolist() == [3, 4, 5]
    with pytest.raises(TypeError, match="does not convert"):
        MemoryMappedTensor(torch.arange(3), dtype=torch.float32, filename=tmp_path / "c")
    assert not (tmp_path / "c").exists()
    path = tmp_path / "m"
    MemoryMappedTensor.from_tensor(torch.arange(6.0).view(2, 3), filename=path)
    assert MemoryMappedTensor(path, dtype=torch.float32, shape=(2, 3), index=(1, 2)).item() == 5.0
    storage = torch.arange(4, dtype=torch.int64).untyped_storage()
    s = MemoryMappedTensor.from_storage(storage, dtype=torch.int64, shape=(2, 2), device="cpu", index=0)
    assert type(s) is MemoryMappedTensor and s.tolist() == [0, 1]
    with pytest.raises(RuntimeError, match="device"):
        MemoryMappedTensor.from_storage(storage, dtype=torch.int64, device="meta")


def test_from_filename_maps_a_read_only_file_copy_on_write(tmp_path, monkeypatch):
    path = tmp_path / "ro.memmap"
    MemoryMappedTensor.from_tensor(torch.arange(4, dtype=torch.int64), filename=path)
    os.chmod(path, 0o444)
    real_access = os.access  # root may write anyway: make the check say what it says to other users
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else real_access(p, mode))
    t = MemoryMappedTensor.from_filename(path, torch.int64, (4,))
    assert t.tolist() == [0, 1, 2, 3]
    t[0] = 100  # the private mapping takes the write; the file does not
    assert t[0].item() == 100
    assert _read_back(path, torch.int64, (4,)).tolist() == [0, 1, 2, 3]
