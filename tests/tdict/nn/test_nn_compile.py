"""torch.compile(fullgraph=True) of module and sequence calls matches eager."""

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq


def test_compiled_module_and_sequence_match_eager():
    torch._dynamo.reset()
    lin1, lin2 = nn.Linear(3, 4), nn.Linear(4, 2)
    single = Mod(lin1, in_keys=["obs"], out_keys=[("net", "hidden")])
    seq = Seq(
        Mod(lin1, in_keys=["obs"], out_keys=["hidden"]),
        Mod(torch.tanh, in_keys=["hidden"], out_keys=["act"]),
        Mod(lambda a, o: (lin2(a), o.sum(-1)), in_keys=["act", "obs"], out_keys=["action", "_"]),
    )

    def run(obs):
        td = TensorDict(obs=obs, batch_size=obs.shape[:1])
        single(td)
        seq(td)
        direct = single(obs=obs)  # the tensor-in, tensor-out (dispatch) call
        return td["net", "hidden"], td["action"], direct

    compiled = torch.compile(run, fullgraph=True, backend="eager")
    obs = torch.randn(5, 3)
    for got, want in zip(compiled(obs), run(obs)):
        torch.testing.assert_close(got, want)


def test_to_module_under_compile_refuses_modules_that_dynamo_does_not_inline():
    """With torch._dynamo.config.inline_inbuilt_nn_modules off, a compiled graph would keep the
    module's own parameters: to_module raises, naming the setting (as tensordict does)."""
    import torch._dynamo

    module = torch.nn.Linear(3, 2)
    zeros = TensorDict.from_module(module).data.clone().zero_()

    def call(x, params):
        with params.to_module(module, preserve_module_state=False):
            return module(x)

    saved = torch._dynamo.config.inline_inbuilt_nn_modules
    torch._dynamo.config.inline_inbuilt_nn_modules = False
    try:
        with pytest.raises(RuntimeError, match="inline_inbuilt_nn_modules"):
            torch.compile(call, fullgraph=True, backend="eager")(torch.randn(4, 3), zeros)
    finally:
        torch._dynamo.config.inline_inbuilt_nn_modules = saved
        torch._dynamo.reset()
    out = torch.compile(call, fullgraph=True, backend="eager")(torch.randn(4, 3), zeros)
    assert (out == 0).all()
