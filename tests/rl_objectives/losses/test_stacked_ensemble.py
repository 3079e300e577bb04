"""Ensembles of linear networks run as one batched call: which networks qualify, the batched call
against a loop over the sets (values and gradients), the probe that keeps the loop for networks
that do not treat the leading dim alike, and the losses that use it (SAC, REDQ, TD3)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize

from rl_objectives import LossModule, REDQLoss, SoftUpdate, TD3Loss
from rl_objectives.losses.sac import SACLoss
from rl_objectives.losses.stacked_ensemble import LinearStack, stacked_matches
from rl_objectives.modules import Actor, ProbabilisticActor, TanhNormal, ValueOperator
from tdict import TensorDict
from tdict.nn import NormalParamExtractor, TensorDictModule
from tdict.specs import Bounded

OBS, ACT = 4, 2


def slots_of(net):
    """Each linear or layer-norm weight and bias slot, in module order (what a loss's swap plan holds)."""
    return [
        (m._parameters, name)
        for m in net.modules()
        if type(m) in (nn.Linear, nn.LayerNorm)
        for name in ("weight", "bias")
        if m._parameters.get(name) is not None
    ]


def loop_reference(net_fn, weights, x):
    """The sets one after the other: ``net_fn(x, set_i)`` stacked."""
    sets = weights[0].shape[0]
    return torch.stack([net_fn(x, [w[i] for w in weights]) for i in range(sets)])


def two_layer(x, w):
    w1, b1, w2, b2 = w
    return F.linear(torch.tanh(F.linear(x, w1, b1)), w2, b2)


# ----------------------------------------------------------------------------- which networks qualify
def test_linear_networks_qualify():
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    assert LinearStack.of(net, slots_of(net)) is not None
    no_bias = nn.Sequential(nn.Linear(3, 8, bias=False), nn.ELU(), nn.Linear(8, 2))
    assert LinearStack.of(no_bias, slots_of(no_bias)) is not None
    normed = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 1))
    assert len(LinearStack.of(normed, slots_of(normed))._places) == 3
    plain_norm = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8, elementwise_affine=False), nn.Linear(8, 1))
    assert len(LinearStack.of(plain_norm, slots_of(plain_norm))._places) == 2  # (no parameters: runs as it is)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return x * self.scale


class _SubLinear(nn.Linear):
    pass


class _Positive(nn.Module):
    def forward(self, w):
        return w.abs()


def _parametrized():
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    parametrize.register_parametrization(net[0], "weight", _Positive())
    return net


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Sequential(nn.Linear(3, 8), nn.GroupNorm(2, 8), nn.Linear(8, 1)),  # another norm's parameters
        lambda: nn.Sequential(nn.Linear(3, 8), _Scaled(), nn.Linear(8, 1)),  # a custom module's own parameter
        lambda: nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)),  # buffers
        lambda: nn.Sequential(_SubLinear(3, 8), nn.Tanh(), nn.Linear(8, 1)),  # a subclass: its own forward
        _parametrized,  # a parametrized layer is no plain nn.Linear
        lambda: nn.Sequential(nn.Tanh(), nn.ReLU()),  # no linear layer at all
    ],
)
def test_networks_with_other_parameters_do_not_qualify(make):
    net = make()
    slots = [(m._parameters, n) for m in net.modules() for n, p in m._parameters.items() if p is not None]
    assert LinearStack.of(net, slots) is None


def test_a_layer_reached_twice_or_a_missing_leaf_does_not_qualify():
    shared = nn.Linear(4, 4)
    net = nn.Sequential(shared, nn.Tanh(), shared)
    assert LinearStack.of(net, slots_of(net)) is None
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    assert LinearStack.of(net, slots_of(net)[:-1]) is None  # the last bias would not come from the leaves
    assert LinearStack.of(net, [*slots_of(net), (net[0].__dict__, "extra")]) is None  # a leaf outside the layers


def test_hooks_and_replaced_layers_make_a_stack_not_intact():
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    stack = LinearStack.of(net, slots_of(net))
    assert stack is not None and stack.intact()
    handle = net[2].register_forward_hook(lambda *args: None)
    assert not stack.intact()
    handle.remove()
    assert stack.intact()
    net[0] = nn.Linear(3, 8)
    assert not stack.intact()


# ----------------------------------------------------------------------------- the batched call
@settings(max_examples=40, deadline=None)
@given(
    sets=st.integers(1, 5),
    batch=st.lists(st.integers(1, 4), min_size=0, max_size=2),
    n_in=st.integers(1, 6),
    hidden=st.integers(1, 9),
    n_out=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_run_equals_the_loop_in_values_and_gradients(sets, batch, n_in, hidden, n_out, seed):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))
    stack = LinearStack.of(net, slots_of(net))
    weights = [
        torch.randn(sets, hidden, n_in, requires_grad=True),
        torch.randn(sets, hidden, requires_grad=True),
        torch.randn(sets, n_out, hidden, requires_grad=True),
        torch.randn(sets, n_out, requires_grad=True),
    ]
    x = torch.randn(*batch, n_in, requires_grad=True)
    out = stack.run(weights, net, (x,))
    expected = loop_reference(two_layer, weights, x)
    assert out.shape == (sets, *batch, n_out)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), [*weights, x])
    expected_grads = torch.autograd.grad(expected.square().sum(), [*weights, x])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # the layers are back in place, and the stand-ins hold no tensor between calls
    assert type(net[0]) is nn.Linear and type(net[2]) is nn.Linear
    assert all(vars(place[3])["weight"] is None for place in stack._places)


@settings(max_examples=30, deadline=None)
@given(
    sets=st.integers(1, 4),
    batch=st.lists(st.integers(1, 4), min_size=0, max_size=2),
    affine=st.sampled_from(["both", "weight", "none"]),
    seed=st.integers(0, 2**16),
)
def test_run_with_layer_norms_equals_the_loop(sets, batch, affine, seed):
    torch.manual_seed(seed)
    norm = nn.LayerNorm(6, elementwise_affine=affine != "none", bias=affine == "both")
    net = nn.Sequential(nn.Linear(3, 6), norm, nn.ReLU(), nn.Linear(6, 2))
    stack = LinearStack.of(net, slots_of(net))
    norm_shapes = {"both": [(6,), (6,)], "weight": [(6,)], "none": []}[affine]
    shapes = [(6, 3), (6,), *norm_shapes, (2, 6), (2,)]
    weights = [torch.randn(sets, *shape, requires_grad=True) for shape in shapes]
    x = torch.randn(*batch, 3, requires_grad=True)

    def one_set(x, w):
        w = list(w)
        h = F.linear(x, w.pop(0), w.pop(0))
        norm_weight = w.pop(0) if affine != "none" else None
        norm_bias = w.pop(0) if affine == "both" else None
        h = F.layer_norm(h, (6,), norm_weight, norm_bias, norm.eps)
        return F.linear(torch.relu(h), w.pop(0), w.pop(0))

    out = stack.run(weights, net, (x,))
    expected = loop_reference(one_set, weights, x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), [*weights, x])
    for got, want in zip(grads, torch.autograd.grad(expected.square().sum(), [*weights, x])):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert type(net[1]) is nn.LayerNorm


def test_run_without_bias_and_several_inputs():
    class Concat(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(5, 6, bias=False), nn.ReLU(), nn.Linear(6, 1))

        def forward(self, obs, action):
            return self.net(torch.cat([obs, action], -1))

    torch.manual_seed(0)
    module = Concat()
    stack = LinearStack.of(module, slots_of(module))
    weights = [torch.randn(3, 6, 5), torch.randn(3, 1, 6), torch.randn(3, 1)]
    obs, action = torch.randn(7, 3), torch.randn(7, 2)
    out = stack.run(weights, module, (obs, action))
    x = torch.cat([obs, action], -1)
    expected = torch.stack([F.linear(torch.relu(x @ weights[0][i].T), weights[1][i], weights[2][i]) for i in range(3)])
    torch.testing.assert_close(out, expected)


def test_a_layer_restored_after_an_error():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    stack = LinearStack.of(net, slots_of(net))
    weights = [torch.randn(2, 4, 3), torch.randn(2, 4), torch.randn(2, 1, 4), torch.randn(2, 1)]
    with pytest.raises(RuntimeError, match="leading dim of 2 parameter sets"):
        stack.run(weights, lambda x: net[0](x[0]), (torch.randn(5, 3),))  # drops the sets' dim
    assert type(net[0]) is nn.Linear


# ----------------------------------------------------------------------------- matching and the probe
def test_stacked_matches():
    ref = torch.tensor([1.0, -2.0, 300.0, float("nan")])
    assert stacked_matches(ref, ref + torch.tensor([1e-5, -1e-5, 1e-3, 0.0]))  # rounding of another product order
    assert not stacked_matches(ref, ref + torch.tensor([0.0, 0.5, 0.0, 0.0]))
    assert not stacked_matches(ref, ref[:3])  # shape
    assert not stacked_matches(ref, ref.double())  # dtype
    assert not stacked_matches(ref, (ref,))  # not a tensor
    assert stacked_matches(torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert not stacked_matches(torch.tensor([1, 2]), torch.tensor([1, 3]))
    assert stacked_matches(torch.empty(0, 3), torch.empty(0, 3))


class _LeadingDimMean(nn.Module):
    """Centres over the first dim: the batch in a loop, but the sets in a stacked call."""

    def forward(self, x):
        return x - x.mean(0)


def _loss_batch(n=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(n, generator=g) < 0.2
    return TensorDict(
        {
            "observation": torch.randn(n, OBS, generator=g),
            "action": torch.rand(n, ACT, generator=g) * 1.8 - 0.9,
            "next": {
                "observation": torch.randn(n, OBS, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[n],
    )


class _Critic(nn.Module):
    def __init__(self, middle=None, hidden=16):
        super().__init__()
        layers = [nn.Linear(OBS + ACT, hidden), nn.Tanh()]
        if middle is not None:
            layers.append(middle)
        self.net = nn.Sequential(*layers, nn.Linear(hidden, 1))

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1))


def _actor_and_critic(middle=None):
    """A tanh-Gaussian actor and a Q-network (seeded: every loss built from them starts alike)."""
    torch.manual_seed(0)
    body = TensorDictModule(
        nn.Sequential(nn.Linear(OBS, 2 * ACT), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    actor = ProbabilisticActor(body, in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True)
    return actor, ValueOperator(_Critic(middle), in_keys=["observation", "action"])


def _sac(middle=None, num_qvalue_nets=2, deactivate_vmap=False):
    actor, critic = _actor_and_critic(middle)
    loss = SACLoss(actor, critic, num_qvalue_nets=num_qvalue_nets, deactivate_vmap=deactivate_vmap)
    SoftUpdate(loss, tau=0.1)
    return loss


def _step(loss, td, seed=0):
    """Outputs and gradients of one loss evaluation (the same draws for every loss)."""
    torch.manual_seed(seed)
    out = loss(td.copy())
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    params = list(loss.parameters())
    grads = torch.autograd.grad(total, params, allow_unused=True)
    return {k: v.detach() for k, v in out.items()}, grads


def _assert_same_step(a, b, rtol=1e-5, atol=1e-6):
    (out_a, grads_a), (out_b, grads_b) = a, b
    assert sorted(out_a.keys()) == sorted(out_b.keys())
    for key in out_a.keys():
        torch.testing.assert_close(out_a[key], out_b[key], rtol=rtol, atol=atol)
    for ga, gb in zip(grads_a, grads_b):
        assert (ga is None) == (gb is None)
        if ga is not None:
            torch.testing.assert_close(ga, gb, rtol=rtol, atol=atol)


@pytest.mark.parametrize("middle", [None, "layer_norm"])
@pytest.mark.parametrize("num_qvalue_nets", [2, 6])
def test_sac_stacked_equals_the_loop(num_qvalue_nets, middle):
    td = _loss_batch()

    def make(**kwargs):
        return _sac(nn.LayerNorm(16) if middle else None, num_qvalue_nets=num_qvalue_nets, **kwargs)

    stacked, looped = make(), make(deactivate_vmap=True)
    for seed in range(3):  # the first call probes, the next ones run stacked
        _assert_same_step(_step(stacked, td, seed), _step(looped, td, seed))
    verdicts = vars(stacked)["_stack_verdicts"]
    assert list(verdicts.values()) == [True] and "_stack_verdicts" not in vars(looped)
    # the stacked call unbinds no parameter set (the loop keeps its gradient-free ones)
    assert not vars(stacked).get("_sets_cache") or all(key[1] != "detached" for key in vars(stacked)["_sets_cache"])


def test_sac_first_and_later_calls_agree_bitwise():
    # one input signature always gets the same path: the probing call returns what later calls return
    loss, td = _sac(), _loss_batch()
    first, second = _step(loss, td, seed=4), _step(loss, td, seed=4)
    for key in first[0].keys():
        assert torch.equal(first[0][key], second[0][key])


def test_a_network_that_mixes_the_leading_dim_keeps_the_loop():
    td = _loss_batch()
    mixed, looped = _sac(middle=_LeadingDimMean()), _sac(middle=_LeadingDimMean(), deactivate_vmap=True)
    for seed in range(2):
        _assert_same_step(_step(mixed, td, seed), _step(looped, td, seed))
    assert list(vars(mixed)["_stack_verdicts"].values()) == [False]


def test_the_probe_leaves_the_random_draws_alone():
    # a random layer fails the probe (the sets draw apart), and the draws after the probe are the
    # ones the loop alone sees: the probing loss gives the looping loss's numbers
    td = _loss_batch()
    noisy, looped = _sac(middle=nn.Dropout(0.3)), _sac(middle=nn.Dropout(0.3), deactivate_vmap=True)
    for seed in range(2):
        _assert_same_step(_step(noisy, td, seed), _step(looped, td, seed))
    assert list(vars(noisy)["_stack_verdicts"].values()) == [False]


def test_new_shapes_are_probed_once_each():
    loss = _sac()
    for n in (12, 12, 8, 12, 8):
        _step(loss, _loss_batch(n))
    assert len(vars(loss)["_stack_verdicts"]) == 2 and all(vars(loss)["_stack_verdicts"].values())


@pytest.mark.parametrize("where", [0, 1])  # a linear layer, the activation after it
def test_a_hook_added_later_sees_the_loop(where):
    loss, td = _sac(), _loss_batch()
    _step(loss, td)
    shapes = []
    loss.qvalue_network.module.net[where].register_forward_hook(lambda m, args, out: shapes.append(out.shape))
    _step(loss, td)
    # the loop ran: a stand-in would skip the hook, and the activation would see the sets' dim
    assert shapes and all(shape == (12, 16) for shape in shapes)


def test_train_and_eval_modes_are_probed_apart():
    # probed in eval mode (dropout off: the sets stack), a dropout layer draws in train mode:
    # that mode is probed on its own (the sets draw apart, the loop serves)
    td = _loss_batch()
    loss, looped = _sac(middle=nn.Dropout(0.3)), _sac(middle=nn.Dropout(0.3), deactivate_vmap=True)
    for net in (loss.qvalue_network, looped.qvalue_network):
        net.eval()
    _assert_same_step(_step(loss, td), _step(looped, td))
    for net in (loss.qvalue_network, looped.qvalue_network):
        net.train()
    _assert_same_step(_step(loss, td, seed=1), _step(looped, td, seed=1))
    assert sorted(vars(loss)["_stack_verdicts"].values()) == [False, True]


def test_redq_and_td3_stacked_equal_the_loop():
    td = _loss_batch()

    def redq(deactivate_vmap):
        actor, critic = _actor_and_critic()
        loss = REDQLoss(actor, critic, num_qvalue_nets=10, sub_sample_len=2, deactivate_vmap=deactivate_vmap)
        SoftUpdate(loss, tau=0.1)
        return loss

    def td3(deactivate_vmap):
        torch.manual_seed(0)
        actor = Actor(nn.Sequential(nn.Linear(OBS, ACT), nn.Tanh()), in_keys=["observation"])
        critic = ValueOperator(_Critic(), in_keys=["observation", "action"])
        spec = Bounded(-1.0, 1.0, shape=(ACT,))
        loss = TD3Loss(actor, critic, action_spec=spec, deactivate_vmap=deactivate_vmap)
        SoftUpdate(loss, tau=0.1)
        return loss

    for make in (redq, td3):
        stacked, looped = make(False), make(True)
        for seed in range(2):
            _assert_same_step(_step(stacked, td, seed), _step(looped, td, seed), rtol=1e-4, atol=1e-5)
        assert vars(stacked)["_stack_verdicts"] and all(vars(stacked)["_stack_verdicts"].values())


class _Ensemble(LossModule):
    def __init__(self, net, sets, deactivate_vmap=False):
        super().__init__()
        self.deactivate_vmap = deactivate_vmap
        self.convert_to_functional(net, "net", expand_dim=sets)

    def forward(self, td):
        return self.call_network("net", td, out_key="prediction")


def test_under_torch_vmap_the_loop_serves():
    # the probe reads values, which a transform's tensors do not allow: inside torch.vmap the
    # sets run in the loop (and no verdict is kept for the shapes seen there)
    torch.manual_seed(0)
    net = TensorDictModule(
        nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), in_keys=["x"], out_keys=["prediction"]
    )
    loss, looped = _Ensemble(net, 3), _Ensemble(net, 3, deactivate_vmap=True)
    looped.load_state_dict(loss.state_dict())
    xs = torch.randn(5, 6, 3)
    mapped = torch.vmap(lambda x: loss(TensorDict(x=x, batch_size=[6])))(xs)
    assert "_stack_verdicts" not in vars(loss)
    expected = torch.stack([looped(TensorDict(x=x, batch_size=[6])) for x in xs])
    assert mapped.shape == (5, 3, 6, 2)
    torch.testing.assert_close(mapped, expected)
    torch.testing.assert_close(torch.stack([loss(TensorDict(x=x, batch_size=[6])) for x in xs]), expected)
    assert list(vars(loss)["_stack_verdicts"].values()) == [True]


def test_copies_and_pickles_of_a_loss_run_their_own_stack():
    import copy
    import io
    import pickle

    loss, td = _sac(), _loss_batch()
    reference = _step(_sac(deactivate_vmap=True), td)
    _assert_same_step(_step(loss, td), reference)
    buffer = io.BytesIO()
    pickle.dump(loss, buffer)
    for twin in (copy.deepcopy(loss), pickle.loads(buffer.getvalue())):
        _assert_same_step(_step(twin, td), reference)
        assert all(vars(twin)["_stack_verdicts"].values())
        # the twin's stack swaps the twin's layers, not the original's
        stack = vars(twin)["_linear_stacks"]["qvalue_network"]
        layers = [m for m in twin.qvalue_network.modules() if type(m) is nn.Linear]
        assert [place[2] for place in stack._places] == layers


def test_large_layers_and_batches_keep_the_loop():
    # on the CPU a batched product per layer is slower than one per set past these sizes (measured)
    def stack_of(width):
        net = nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, 1))
        return LinearStack.of(net, slots_of(net)), [
            torch.empty(2, width, 3),
            torch.empty(2, width),
            torch.empty(2, 1, width),
            torch.empty(2, 1),
        ]

    small, small_leaves = stack_of(64)
    assert small.pays_off(small_leaves, [torch.empty(256, 3)])
    assert not small.pays_off(small_leaves, [torch.empty(4096, 3)])  # 4096 rows x 64 wide
    wide, wide_leaves = stack_of(512)  # one set's weights: 512 x 3 and 1 x 512, under the bound
    assert wide.pays_off(wide_leaves, [torch.empty(128, 3)]) and not wide.pays_off(wide_leaves, [torch.empty(512, 3)])
    net = nn.Sequential(nn.Linear(3, 300), nn.Tanh(), nn.Linear(300, 300), nn.Tanh(), nn.Linear(300, 1))
    square = LinearStack.of(net, slots_of(net))
    leaves = [torch.empty(2, *p.shape) for m in net.modules() if type(m) is nn.Linear for p in (m.weight, m.bias)]
    assert not square.pays_off(leaves, [torch.empty(8, 3)])  # a 300 x 300 layer


def test_a_loss_with_large_critics_keeps_the_loop():
    td = _loss_batch(n=9000)  # 9000 rows x 16 wide: past the bound
    loss = _sac()
    _step(loss, td)
    assert list(vars(loss)["_stack_verdicts"].values()) == [False]
