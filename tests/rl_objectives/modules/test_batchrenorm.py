"""BatchRenorm1d (TorchRL 0.14.1's name and signature) against the formulas written out here.

Warm-up = batch norm with the batch's biased statistics; the running mean / unbiased variance
follow ``running += momentum * (batch - running)``; after the warm-up the batch is corrected by
``r`` and ``d`` (clamped, detached); ``smooth`` ramps them in; evaluation uses the running
statistics only; ``[N, C, L]`` inputs pool ``N * L`` values per feature; compile; bad arguments.
"""

import pytest
import torch
from rl_objectives.modules import BatchRenorm1d

C = 3


def reference(x, rm, rv, n, *, momentum, eps=1e-5, max_r=3.0, max_d=5.0, warmup, smooth=False, w=None, b=None):
    """One training step written out: ``(y, new running mean, new running var)``; ``x`` is ``[N, C]``."""
    mean, var = x.mean(0), x.var(0, unbiased=False)
    std, rstd = (var + eps).sqrt(), (rv + eps).sqrt()
    factor = min(n / warmup, 1.0) if smooth else float(n >= warmup)
    r = 1 + ((std.detach() / rstd).clamp(1 / max_r, max_r) - 1) * factor
    d = ((mean.detach() - rm) / rstd).clamp(-max_d, max_d) * factor
    y = (x - mean) / std * r + d
    if w is not None:
        y = w * y + b
    k = x.shape[0]
    return y, rm + momentum * (mean.detach() - rm), rv + momentum * (var.detach() * k / (k - 1) - rv)


def batches(n, seed=0, k=8):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(k, C, generator=g) * torch.tensor([1.0, 4.0, 0.2]) + torch.tensor([0.0, 3.0, -1.0])
        for _ in range(n)
    ]


@pytest.mark.parametrize("smooth", [False, True])
def test_training_steps_match_the_formula(smooth):
    norm = BatchRenorm1d(C, momentum=0.2, warmup_steps=3, smooth=smooth)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        norm.bias.copy_(torch.tensor([0.0, -1.0, 0.3]))
    rm, rv = torch.zeros(C), torch.ones(C)
    for n, x in enumerate(batches(7)):  # 3 warm-up steps, then the corrections (kept at factor 1)
        y, rm, rv = reference(x, rm, rv, n, momentum=0.2, warmup=3, smooth=smooth, w=norm.weight, b=norm.bias)
        torch.testing.assert_close(norm(x), y)
        torch.testing.assert_close(norm.running_mean, rm)
        torch.testing.assert_close(norm.running_var, rv)
        assert int(norm.num_batches_tracked) == n + 1


def test_warmup_is_plain_batch_norm_and_the_corrections_then_apply():
    x = batches(1)[0]
    norm = BatchRenorm1d(C, warmup_steps=5)
    bn = torch.nn.BatchNorm1d(C, momentum=0.01)
    torch.testing.assert_close(norm(x), bn(x))
    torch.testing.assert_close(norm.running_mean, bn.running_mean)
    torch.testing.assert_close(norm.running_var, bn.running_var)
    # after the warm-up, a batch far from the running statistics is pulled towards them: r, d clamped
    after = BatchRenorm1d(C, warmup_steps=0, max_r=1.5, max_d=0.5)
    y = after(x * 10 + 100)
    mean, std = (x * 10 + 100).mean(0), ((x * 10 + 100).var(0, unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(y, ((x * 10 + 100) - mean) / std * 1.5 + 0.5)


def test_gradients_flow_through_the_batch_statistics_only():
    x = batches(1)[0].requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    norm = BatchRenorm1d(C, warmup_steps=0)
    with torch.no_grad():
        norm.running_mean.fill_(0.5)
        norm.running_var.fill_(2.0)
    y_ref, _, _ = reference(x_ref, torch.full((C,), 0.5), torch.full((C,), 2.0), 0, momentum=0.01, warmup=0)
    (norm(x) * torch.arange(8.0).unsqueeze(-1)).sum().backward()
    (y_ref * torch.arange(8.0).unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert norm.weight.grad is not None and norm.bias.grad is not None
    assert not norm.running_mean.requires_grad and not norm.running_var.requires_grad


def test_eval_uses_the_running_statistics_and_updates_nothing():
    norm = BatchRenorm1d(C, warmup_steps=2)
    for x in batches(3):
        norm(x)
    state = {k: v.clone() for k, v in norm.state_dict().items()}
    norm.eval()
    x = torch.randn(4, C)
    torch.testing.assert_close(norm(x), (x - norm.running_mean) / (norm.running_var + 1e-5).sqrt())
    norm(torch.randn(1, C))  # a single row is fine in evaluation
    for k, v in norm.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_a_channel_dim_pools_every_position():
    x = torch.randn(4, C, 5)
    norm = BatchRenorm1d(C, momentum=1.0, warmup_steps=10)
    y = norm(x)
    flat = x.transpose(1, 2).reshape(-1, C)  # [N * L, C]
    expected = (flat - flat.mean(0)) / (flat.var(0, unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(y.transpose(1, 2).reshape(-1, C), expected)
    torch.testing.assert_close(norm.running_var, flat.var(0, unbiased=True))


def test_reset_and_state_dict():
    norm = BatchRenorm1d(C, warmup_steps=1)
    norm(batches(1)[0])
    assert sorted(norm.state_dict()) == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]
    norm.reset_parameters()
    assert int(norm.num_batches_tracked) == 0 and torch.equal(norm.running_var, torch.ones(C))
    assert "warmup_steps=1" in repr(norm)


def test_compiled_matches_eager():
    eager, compiled_module = BatchRenorm1d(C, warmup_steps=1), BatchRenorm1d(C, warmup_steps=1)
    compiled = torch.compile(compiled_module, fullgraph=True, backend="eager")
    torch.compiler.reset()
    try:
        for x in batches(3):
            torch.testing.assert_close(compiled(x), eager(x))
        torch.testing.assert_close(compiled_module.running_var, eager.running_var)
        assert int(compiled_module.num_batches_tracked) == 3
    finally:
        torch.compiler.reset()


def test_errors():
    with pytest.raises(ValueError, match="num_features"):
        BatchRenorm1d(0)
    with pytest.raises(ValueError, match="momentum"):
        BatchRenorm1d(C, momentum=1.5)
    with pytest.raises(ValueError, match="max_r"):
        BatchRenorm1d(C, max_r=0.5)
    with pytest.raises(ValueError, match="max_d"):
        BatchRenorm1d(C, max_d=-1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        BatchRenorm1d(C, warmup_steps=-1)
    with pytest.raises(ValueError, match="eps"):
        BatchRenorm1d(C, eps=0.0)
    with pytest.raises(TypeError):
        BatchRenorm1d(C, 0.1)  # pyright: ignore[reportCallIssue]  (keyword-only, as TorchRL)
    norm = BatchRenorm1d(C)
    with pytest.raises(ValueError, match=r"expected an input \[N, 3\]"):
        norm(torch.randn(4, C + 1))
    with pytest.raises(ValueError, match="expected an input"):
        norm(torch.randn(C))
    with pytest.raises(ValueError, match="more than one value per feature"):
        norm(torch.randn(1, C))
