"""CudaGraphModule: eager fallback on CPU (same API), capture/replay equals eager on CUDA."""

import warnings

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import CudaGraphModule, TensorDictModule


def _policy(device="cpu"):
    torch.manual_seed(0)
    return TensorDictModule(
        nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2)), in_keys=["obs"], out_keys=["action"]
    ).to(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_cpu_fallback_runs_eagerly_and_warns():
    policy = _policy()
    with pytest.warns(UserWarning, match="eagerly"):
        graphed = CudaGraphModule(policy, warmup=2)
    with pytest.warns(UserWarning, match="eagerly"):  # each construction (tensordict's tests expect it)
        CudaGraphModule(policy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graphed(TensorDict(obs=torch.randn(5, 3), batch_size=[5]))  # calls do not warn
    assert graphed.in_keys == ["obs"] and graphed.out_keys == ["action"]
    for _ in range(4):
        obs = torch.randn(5, 3)
        out = graphed(TensorDict(obs=obs, batch_size=[5]))
        torch.testing.assert_close(out["action"], policy.module(obs))
    fn = CudaGraphModule(lambda x, y: x * y + 1)
    torch.testing.assert_close(fn(torch.ones(2), torch.full((2,), 3.0)), torch.full((2,), 4.0))


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup"):
        CudaGraphModule(lambda x: x, warmup=0)
    with pytest.raises(TypeError, match="callable"):
        CudaGraphModule(3)


@pytest.mark.gpu
def test_capture_replay_matches_eager_on_cuda():
    policy = _policy("cuda")
    graphed = CudaGraphModule(policy, warmup=2)
    captured_inputs = []
    for i in range(6):
        obs = torch.randn(5, 3, device="cuda")
        captured_inputs.append(obs)
        out = graphed(TensorDict(obs=obs, batch_size=[5]))
        with torch.no_grad():
            torch.testing.assert_close(out["action"], policy.module(obs))
    assert graphed._graph is not None
    first = out["action"]
    graphed(TensorDict(obs=torch.zeros(5, 3, device="cuda"), batch_size=[5]))
    with torch.no_grad():
        torch.testing.assert_close(first, policy.module(captured_inputs[-1]))  # outputs are clones
    with pytest.raises(ValueError, match="obs"):
        graphed(TensorDict(obs=torch.zeros(7, 3, device="cuda"), batch_size=[7]))
    lin = nn.Linear(3, 2).cuda()
    fn = CudaGraphModule(lambda x: lin(x).relu(), warmup=1)
    for _ in range(4):
        x = torch.randn(4, 3, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(fn(x), lin(x).relu())
    assert fn._graph is not None
