"""Value transforms (TorchRL 0.14.1's ValueTransform family) and signed_hyperbolic / signed_parabolic.

The formulas against numpy, the inverses' round trips over wide ranges (hypothesis), the gradient
at 0, composition order, the shared symlog/symexp, and bad arguments.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives import signed_hyperbolic as top_signed_hyperbolic
from rl_objectives.functional import signed_hyperbolic, signed_parabolic, symexp, symlog
from rl_objectives.modules import (
    ComposeValueTransform,
    IdentityValueTransform,
    SignedHyperbolicValueTransform,
    SymLogValueTransform,
    ValueTransform,
)
from rl_objectives.modules import signed_parabolic as modules_signed_parabolic

EPSILONS = [1e-3, 1e-2, 0.5, 2.0]
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def np_signed_hyperbolic(x, eps):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


@pytest.mark.parametrize("eps", EPSILONS)
def test_signed_hyperbolic_is_the_formula_and_parabolic_its_inverse(eps):
    x = np.concatenate([np.linspace(-1e4, 1e4, 2001), np.geomspace(1e-8, 1e8, 50), -np.geomspace(1e-8, 1e8, 50)])
    y = signed_hyperbolic(torch.as_tensor(x), eps)
    np.testing.assert_allclose(y.numpy(), np_signed_hyperbolic(x, eps), rtol=1e-12, atol=1e-14)
    # the inverse: the pre-image of y solves sign(x) (sqrt(|x| + 1) - 1) + eps x = y
    back = signed_parabolic(y, eps).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        np_signed_hyperbolic(signed_parabolic(torch.as_tensor(x), eps).numpy(), eps), x, rtol=1e-9, atol=1e-14
    )


@settings(max_examples=200)
@given(st.lists(finite, min_size=1, max_size=20), st.sampled_from(EPSILONS))
def test_signed_hyperbolic_round_trips_both_ways(values, eps):
    x = torch.tensor(values, dtype=torch.float64)
    torch.testing.assert_close(signed_parabolic(signed_hyperbolic(x, eps), eps), x, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(signed_hyperbolic(signed_parabolic(x, eps), eps), x, rtol=1e-9, atol=1e-9)


@settings(max_examples=100)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=20))
def test_float32_round_trip_to_float_tolerance(values):
    x = torch.tensor(values, dtype=torch.float32)
    for t in (SignedHyperbolicValueTransform(), SymLogValueTransform()):
        torch.testing.assert_close(t.inverse(t(x)), x, rtol=1e-4, atol=1e-4)


def test_gradient_at_zero_is_the_formulas_slope():
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    eps = 0.01
    (g,) = torch.autograd.grad(signed_hyperbolic(x, eps).sum(), x)
    torch.testing.assert_close(g, torch.full((3,), 0.5 + eps, dtype=torch.float64))
    (g,) = torch.autograd.grad(signed_parabolic(x, eps).sum(), x)
    torch.testing.assert_close(g, torch.full((3,), 1 / (0.5 + eps), dtype=torch.float64))
    # away from 0: the analytic derivative 1 / (2 sqrt(|x| + 1)) + eps
    x = torch.tensor([-3.0, 0.5, 8.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(signed_hyperbolic(x, eps).sum(), x)
    torch.testing.assert_close(g, 1 / (2 * torch.sqrt(x.detach().abs() + 1)) + eps)


def test_exports_are_the_same_functions():
    assert top_signed_hyperbolic is signed_hyperbolic and modules_signed_parabolic is signed_parabolic


def test_modules_apply_the_functions():
    x = torch.linspace(-50, 50, 101)
    ident = IdentityValueTransform()
    assert ident(x) is x and ident.inverse(x) is x
    sl = SymLogValueTransform()
    torch.testing.assert_close(sl(x), symlog(x), rtol=0, atol=0)
    torch.testing.assert_close(sl.inverse(x), symexp(x), rtol=0, atol=0)
    torch.testing.assert_close(sl(x), torch.sign(x) * torch.log1p(x.abs()))
    sh = SignedHyperbolicValueTransform(epsilon=0.1)
    assert sh.epsilon == 0.1 and "epsilon=0.1" in repr(sh)
    torch.testing.assert_close(sh(x), signed_hyperbolic(x, 0.1), rtol=0, atol=0)
    torch.testing.assert_close(sh.inverse(x), signed_parabolic(x, 0.1), rtol=0, atol=0)


def test_compose_applies_in_order_and_inverts_in_reverse_order():
    class Affine(ValueTransform):
        def __init__(self, a, b):
            super().__init__()
            self.a, self.b = a, b

        def forward(self, value):
            return value * self.a + self.b

        def inverse(self, value):
            return (value - self.b) / self.a

    x = torch.tensor([-2.0, 0.0, 3.0])
    t = ComposeValueTransform(Affine(2.0, 1.0), Affine(3.0, -1.0))
    torch.testing.assert_close(t(x), (x * 2 + 1) * 3 - 1)
    torch.testing.assert_close(t.inverse(t(x)), x)
    nonlinear = ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform(), Affine(0.5, 2.0))
    y = torch.linspace(-1e3, 1e3, 41, dtype=torch.float64)
    torch.testing.assert_close(nonlinear(y), symlog(signed_hyperbolic(y)) * 0.5 + 2.0)
    torch.testing.assert_close(nonlinear.inverse(nonlinear(y)), y)
    assert len(list(nonlinear.transforms)) == 3  # an nn.ModuleList: .to() / state_dict reach the parts


def test_bad_arguments_raise():
    for eps in (0.0, -1e-3, True, "0.1"):
        with pytest.raises(ValueError, match="epsilon must be a positive number"):
            SignedHyperbolicValueTransform(epsilon=eps)  # pyright: ignore[reportArgumentType]
        with pytest.raises(ValueError, match="signed_hyperbolic: epsilon"):
            signed_hyperbolic(torch.ones(1), eps)  # pyright: ignore[reportArgumentType]
        with pytest.raises(ValueError, match="signed_parabolic: epsilon"):
            signed_parabolic(torch.ones(1), eps)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="at least one transform"):
        ComposeValueTransform()
    with pytest.raises(TypeError, match="must be a ValueTransform"):
        ComposeValueTransform(SymLogValueTransform(), torch.nn.Identity())  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError):  # abstract
        ValueTransform()  # pyright: ignore[reportAbstractUsage]
