"""``td.data``, ``td.grad`` and ``td.backward()``, against the same computation on the tensors."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict


def _params():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([0.5], requires_grad=True)
    return w, b


def test_backward_of_scalar_terms_equals_the_backward_of_their_sum():
    w, b = _params()
    TensorDict(a=(w * w).sum(), nested=TensorDict(c=(3 * b).sum()), step=torch.tensor(4)).backward()
    w2, b2 = _params()
    ((w2 * w2).sum() + (3 * b2).sum()).backward()
    assert torch.equal(w.grad, w2.grad) and torch.equal(b.grad, b2.grad)


def test_backward_with_gradient_weights_each_leaf_by_key():
    w, b = _params()
    out = TensorDict(y=w * 2, z=b * w[:1], batch_size=[])
    out.backward(TensorDict(y=torch.tensor([1.0, 10.0]), z=torch.tensor([100.0])))
    # dy/dw = 2 weighted [1, 10]; dz/dw0 = b weighted 100; dz/db = w0 weighted 100
    assert w.grad.tolist() == [2.0 + 100 * 0.5, 20.0] and b.grad.tolist() == [100.0]


def test_backward_inputs_restrict_which_leaves_accumulate():
    w, b = _params()
    TensorDict(loss=(w.sum() * b).sum()).backward(inputs=TensorDict(b=b))
    assert w.grad is None and b.grad.tolist() == [3.0]


def test_backward_errors_name_the_leaf():
    w, _ = _params()
    with pytest.raises(ValueError, match=r"leaves \['y'\] hold several elements"):
        TensorDict(y=w * 2).backward()
    with pytest.raises(KeyError, match="no entry 'y'"):
        TensorDict(y=w * 2).backward(TensorDict(x=torch.ones(2)))
    with pytest.raises(ValueError, match=r"gradient 'y' has shape \[3\]"):
        TensorDict(y=w * 2).backward(TensorDict(y=torch.ones(3)))
    with pytest.raises(RuntimeError, match="no leaf of this TensorDict requires grad"):
        TensorDict(y=torch.ones(2)).backward()
    assert w.grad is None  # nothing ran


def test_grad_collects_existing_gradients_and_assigns_by_key():
    w, b = _params()
    td = TensorDict(w=w, b=b, n=TensorDict(step=torch.zeros(3)))
    assert td.grad is None  # no gradient yet: None, as tensordict
    (5 * w).sum().backward()
    assert list(td.grad.keys()) == ["w"] and td.grad["w"].tolist() == [5.0, 5.0]
    td.grad = TensorDict(b=torch.tensor([7.0]), w=torch.tensor([1.0, 1.0]))
    assert b.grad.tolist() == [7.0] and w.grad.tolist() == [1.0, 1.0]  # copied into the existing one
    with pytest.raises(KeyError, match=r"keys \['x'\] are not leaves"):
        td.grad = TensorDict(x=torch.ones(1))


def test_data_shares_storage_outside_the_graph_and_assigns_by_key():
    w, b = _params()
    td = TensorDict(w=w, b=b)
    data = td.data
    assert not data["w"].requires_grad and data["w"].data_ptr() == w.data_ptr()
    td.data = TensorDict(w=torch.tensor([9.0, 8.0]), b=torch.tensor([1.0]))
    assert w.tolist() == [9.0, 8.0] and w.requires_grad and b.tolist() == [1.0]
    with pytest.raises(ValueError, match=r"key 'w' has shape \[3\]"):
        td.data = TensorDict(w=torch.ones(3))
