"""scalar_like: a Python number as a cached 0-d tensor, with the same arithmetic results."""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from tdict import scalar_like

finite = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(value=finite, seed=st.integers(0, 2**16))
def test_same_results_as_the_number(value: float, seed: int) -> None:
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed))
    c = scalar_like(value, x)
    assert isinstance(c, torch.Tensor) and c.shape == () and c.dtype == torch.float32
    for op in (torch.mul, torch.add, torch.sub, torch.div):
        assert torch.equal(op(x, c), op(x, value)), op
    assert torch.equal(c - x, value - x)


def test_made_once_per_value() -> None:
    x = torch.ones(2)
    assert scalar_like(0.25, x) is scalar_like(0.25, torch.zeros(7, 1))
    assert scalar_like(0.25, x) is not scalar_like(0.5, x)
    assert not scalar_like(0.25, x).requires_grad


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_other_dtypes_keep_the_number(dtype: torch.dtype) -> None:
    # float64: nothing to convert; half types: a 0-d tensor would round the number first
    assert scalar_like(0.1, torch.zeros(2, dtype=dtype)) == 0.1
    assert type(scalar_like(0.1, torch.zeros(2, dtype=dtype))) is float


def test_gradients_flow_through_the_other_operand() -> None:
    x = torch.randn(4, requires_grad=True)
    (x * scalar_like(3.0, x)).sum().backward()
    assert torch.equal(x.grad, torch.full((4,), 3.0))


def test_inference_mode_makes_a_tensor_usable_with_autograd() -> None:
    # first made under inference mode, then used in a call that records gradients
    with torch.inference_mode():
        made = scalar_like(0.3140625, torch.ones(2))
    assert not made.is_inference()
    x = torch.ones(2, requires_grad=True)
    (x * scalar_like(0.3140625, x)).sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 0.3140625))


def test_compiled_code_sees_the_number() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * scalar_like(2.5, x) - scalar_like(1.0, x)

    x = torch.randn(6)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="eager")(x), x * 2.5 - 1.0)


def test_under_vmap() -> None:
    x = torch.randn(3, 4)
    assert torch.equal(torch.vmap(lambda row: row * scalar_like(-0.5, row))(x), x * -0.5)


def test_meta_device_keeps_the_number() -> None:
    assert scalar_like(0.1, torch.zeros(2, device="meta")) == 0.1


def test_made_on_the_cpu_under_another_default_device() -> None:
    with torch.device("meta"):
        made = scalar_like(0.2718281, torch.ones(2, device="cpu"))
    assert made.device.type == "cpu"
    assert torch.equal(torch.ones(2) * scalar_like(0.2718281, torch.ones(2)), torch.ones(2) * 0.2718281)
