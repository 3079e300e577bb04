"""LossModule (networks, target copies, ensembles, keys) and the target updaters."""

import warnings

import pytest
import torch
from torch import nn

from rl_objectives import HardUpdate, LossModule, SoftUpdate, total_loss
from tdict import TensorDict
from tdict.nn import TensorDictModule


class Probe(LossModule):
    default_keys = {"prediction": "prediction", "target": "target", "value": "state_value"}

    def __init__(self, net, expand_dim=None, target=True):
        super().__init__()
        self.convert_to_functional(net, "net", expand_dim=expand_dim, create_target_params=target)

    def forward(self, td):
        out = self.call_network("net", td)
        return TensorDict(loss_mse=(out[self.tensor_keys.prediction] - td[self.tensor_keys.target]).pow(2).mean())


def make_net(seed=0, bn=False):
    torch.manual_seed(seed)
    layers = [nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)]
    if bn:
        layers.insert(1, nn.BatchNorm1d(4))
    return TensorDictModule(nn.Sequential(*layers), in_keys=["x"], out_keys=["prediction"])


def batch(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(x=torch.randn(n, 3, generator=g), target=torch.randn(n, 2, generator=g), batch_size=[n])


def test_parameters_are_the_networks_own_and_train_it():
    net = make_net()
    loss = Probe(net)
    assert {id(p) for p in loss.parameters()} == {id(p) for p in net.parameters()}
    before = net.module[0].weight.detach().clone()
    opt = torch.optim.SGD(loss.parameters(), lr=0.1)
    loss(batch())["loss_mse"].backward()
    opt.step()
    assert not torch.equal(net.module[0].weight, before)


def test_target_params_are_detached_buffers_with_their_own_storage():
    net = make_net()
    loss = Probe(net)
    target = loss.params_of("net", target=True)
    source = loss.params_of("net")
    param_ids = {id(p) for p in loss.parameters()}
    for key in source.keys(True, True):
        assert torch.equal(target[key], source[key])
        assert id(target[key]) not in param_ids and not target[key].requires_grad
        assert target[key].data_ptr() != source[key].data_ptr()
    buffers = dict(loss.named_buffers())
    assert "target_net_params.module.0.weight" in buffers and "target_net_params.module.0.weight" in loss.state_dict()
    with torch.no_grad():
        net.module[2].bias.add_(1.0)
    td = batch()
    expected = net(td.clone())["prediction"] - 1.0
    assert torch.allclose(loss.call_network("net", td.clone(), target=True)["prediction"], expected, atol=1e-6)


@pytest.mark.parametrize("n", [3, 6])  # a loop over the sets, then one vmapped call
def test_expanded_network_is_an_ensemble_of_parameter_sets(n):
    net = make_net()
    loss = Probe(net, expand_dim=n)
    params = loss.params_of("net")
    assert params["module", "0", "weight"].shape == (n, 4, 3)
    assert torch.equal(params["module", "0", "weight"][0], net.module[0].weight)  # set 0: the module's values
    assert not torch.equal(params["module", "0", "weight"][1], params["module", "0", "weight"][2])
    # the template's own tensors are not trained
    assert {id(p) for p in loss.parameters()} == {id(p) for p in params.values(True, True)}
    td = batch()
    out = loss.call_network("net", td)["prediction"]
    assert out.shape == (n, 6, 2) and list(td.keys()) == ["x", "target"]  # the input is not written
    for i in range(n):
        with params[i].to_module(net):
            assert torch.allclose(out[i], net(td.clone())["prediction"], atol=1e-6)
    loss(td)["loss_mse"].backward()
    assert params["module", "0", "weight"].grad.shape == (n, 4, 3)


@pytest.mark.parametrize("n", [None, 2, 6])  # one set, the loop over sets, the vmapped call
def test_out_key_returns_that_entry_of_the_full_call(n):
    loss = Probe(make_net(), expand_dim=n)
    td = batch()
    full = loss.call_network("net", td.clone())["prediction"]
    only = loss.call_network("net", td.clone(), out_key="prediction")
    assert only.shape == ((6, 2) if n is None else (n, 6, 2))
    assert torch.allclose(only, full, atol=1e-6)
    with pytest.raises(KeyError, match="net wrote no 'missing'.*prediction"):
        loss.call_network("net", td.clone(), out_key="missing")


def test_swapped_runs_the_network_with_given_params_and_puts_its_own_back():
    net = make_net()
    loss = Probe(net)
    own = {k: v for k, v in loss.params_of("net").items(True, True)}
    zeros = loss.params_of("net").detach().apply(torch.zeros_like)
    td = batch()
    with loss.swapped("net", zeros):
        assert torch.equal(net(td.clone())["prediction"], torch.zeros(6, 2))
    with loss.swapped("net", target=True):  # the target copy: equal values, other tensors
        assert net.module[0].weight is loss.params_of("net", target=True)["module", "0", "weight"]
    with pytest.raises(RuntimeError, match="inside"):
        with loss.swapped("net", zeros):
            raise RuntimeError("inside")
    # after leaving (also through an exception) the module holds its own Parameters, in their order
    assert [name for name, _ in net.named_parameters()] == [
        "module.0.weight",
        "module.0.bias",
        "module.2.weight",
        "module.2.bias",
    ]
    for key, value in own.items():
        assert net.get_submodule(".".join(key[:-1])).get_parameter(key[-1]) is value
    # gradients reach the tensors that were swapped in
    w = loss.params_of("net").detach().clone().apply(lambda t: t.requires_grad_())
    with loss.swapped("net", w):
        net(td.clone())["prediction"].sum().backward()
    assert w["module", "0", "weight"].grad is not None and net.module[0].weight.grad is None


def test_soft_update_is_polyak_averaging():
    loss = Probe(make_net(bn=True))
    updater = SoftUpdate(loss, tau=0.25)
    source, target = loss.params_of("net"), loss.params_of("net", target=True)
    with torch.no_grad():
        for key in source.keys(True, True):
            if source[key].is_floating_point():
                source[key].add_(torch.randn_like(source[key]))
        source["module", "1", "num_batches_tracked"].fill_(7)
    before = target.clone()
    updater.step()
    for key in source.keys(True, True):
        if source[key].is_floating_point():
            assert torch.allclose(target[key], 0.75 * before[key] + 0.25 * source[key], atol=1e-6)
    assert int(target["module", "1", "num_batches_tracked"]) == 7  # integers are copied


def test_hard_update_copies_every_interval():
    loss = Probe(make_net())
    updater = HardUpdate(loss, value_network_update_interval=3)
    source, target = loss.params_of("net"), loss.params_of("net", target=True)
    with torch.no_grad():
        source["module", "0", "bias"].fill_(5.0)
    for step in range(1, 7):
        updater.step()
        copied = bool((target["module", "0", "bias"] == 5.0).all())
        assert copied == (step >= 3), step


def test_hard_update_step_n_counts_n_steps():
    """step(n) equals n calls of step() for when copies happen, and copies once per call at most."""
    for interval in (1, 3, 7):
        loss = Probe(make_net())
        updater = HardUpdate(loss, value_network_update_interval=interval)
        bias = loss.params_of("net")["module", "0", "bias"]
        target = loss.params_of("net", target=True)["module", "0", "bias"]
        ref_counter, value = 0, 0.0
        for n in [1, 2, 0, 5, 3, 1, 14, 2, 6]:
            value += 1.0
            with torch.no_grad():
                bias.fill_(value)
            before = float(target[0])
            # reference: n single steps; a copy if any of them lands on a multiple of the interval
            copies = [c for c in range(ref_counter + 1, ref_counter + n + 1) if c % interval == 0]
            ref_counter += n
            updater.step(n)
            assert updater.counter == ref_counter
            assert float(target[0]) == (value if copies else before), (interval, n)
    loss = Probe(make_net())
    updater = HardUpdate(loss, value_network_update_interval=2)
    for bad in (-1, 1.0, True, None):
        with pytest.raises(
            ValueError,
            match=rf"HardUpdate.step: n \(the number of steps to count\) must be a non-negative int, got {bad!r}",
        ):
            updater.step(bad)
    assert updater.counter == 0


def test_soft_update_step_n_is_n_polyak_steps():
    loss = Probe(make_net(bn=True))
    updater = SoftUpdate(loss, tau=0.2)
    source, target = loss.params_of("net"), loss.params_of("net", target=True)
    with torch.no_grad():
        for key in source.keys(True, True):
            if source[key].is_floating_point():
                source[key].add_(torch.randn_like(source[key]))
        source["module", "1", "num_batches_tracked"].fill_(4)
    reference = target.clone()
    for _ in range(5):  # five single Polyak steps, by hand
        for key in source.keys(True, True):
            if source[key].is_floating_point():
                reference[key] = 0.8 * reference[key] + 0.2 * source[key]
    before = target.clone()
    updater.step(0)
    assert (target == before).all()  # n=0: nothing moves, integers included
    updater.step(5)
    for key in source.keys(True, True):
        if source[key].is_floating_point():
            torch.testing.assert_close(target[key], reference[key], atol=1e-6, rtol=1e-6)
    assert int(target["module", "1", "num_batches_tracked"]) == 4
    with pytest.raises(ValueError, match="SoftUpdate.step: n .* got -2"):
        updater.step(-2)


def test_updaters_reject_bad_arguments():
    loss = Probe(make_net())
    with pytest.raises(ValueError, match="One and only one argument of eps and tau"):
        SoftUpdate(loss, eps=0.9, tau=0.1)
    with pytest.raises(ValueError, match="eps must be in"):
        SoftUpdate(loss, tau=1.5)
    with pytest.raises(ValueError, match="value_network_update_interval"):
        HardUpdate(loss, value_network_update_interval=0)
    for error in (RuntimeError, ValueError):  # TorchRL's RuntimeError, and our ValueError of earlier releases
        with pytest.raises(error, match="Did not find any target parameters or buffers in the loss module Probe"):
            SoftUpdate(Probe(make_net(), target=False), tau=0.1)
    for error in (TypeError, ValueError):  # a TypeError that TorchRL's ValueError handlers catch too
        with pytest.raises(error, match="The loss_module must be a LossModule instance, got Linear"):
            SoftUpdate(nn.Linear(2, 2), tau=0.1)
    with pytest.raises(TypeError, match="LossModule"):
        SoftUpdate(nn.Linear(2, 2), tau=0.1)


@pytest.mark.parametrize("updater", [lambda loss: SoftUpdate(loss, tau=0.1), lambda loss: HardUpdate(loss)])
def test_updaters_pair_sources_and_targets_by_name(updater):
    loss = Probe(make_net(bn=True))
    upd = updater(loss)
    # TorchRL's layout: "<name>_params" and "target_<name>_params", the loss's own tensors
    assert set(upd._sources.keys()) == {"net_params"} and set(upd._targets.keys()) == {"target_net_params"}
    for key, source in upd._sources.items(True, True):
        target = upd._targets[("target_" + key[0], *key[1:])]
        assert source is loss.params_of("net")[key[1:]]
        assert target is loss.params_of("net", target=True)[key[1:]]
        assert torch.equal(source, target)  # initialised by the constructor
    with torch.no_grad():
        for target in upd._targets.values(True, True):
            target.add_(1)
    with pytest.warns(UserWarning, match="already initialized"):
        upd.init_()  # copies again, and says so
    for key, source in upd._sources.items(True, True):
        assert torch.equal(source, upd._targets[("target_" + key[0], *key[1:])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a scheduled copy is not a second initialisation
        for _ in range(1001):
            upd.step()


def test_register_coeff_buffer():
    loss = Probe(make_net())
    loss.register_coeff_buffer("entropy_coeff", 0.01)
    assert dict(loss.named_buffers())["entropy_coeff"] is loss.entropy_coeff
    assert loss.entropy_coeff.dtype == torch.float32 and loss.entropy_coeff.shape == ()
    torch.testing.assert_close(loss.entropy_coeff, torch.tensor(0.01))
    loss.register_coeff_buffer("beta", torch.tensor([2.0]), dtype=torch.float64)
    assert loss.beta.dtype == torch.float64 and loss.beta.tolist() == [2.0]
    loss.register_coeff_buffer("critic_coeff", None)  # off: a plain attribute, not a buffer
    assert loss.critic_coeff is None and "critic_coeff" not in dict(loss.named_buffers())
    loss.to(torch.float64)
    assert loss.entropy_coeff.dtype == torch.float64
    for bad, shown in ((True, "True"), ("0.1", "'0.1'"), (torch.ones(2), r"shape \(2,\)")):
        with pytest.raises(
            ValueError, match=f"register_coeff_buffer: c must be a float or a scalar tensor, got .*{shown}"
        ):
            loss.register_coeff_buffer("c", bad)
    assert "c" not in dict(loss.named_buffers())


def test_value_estimator_keys_hook_takes_keyword_arguments():
    class Recorder:
        def __init__(self):
            self.keys = {}

        def set_keys(self, **keys):
            self.keys.update(keys)

    calls = []

    class WithInKeys(Probe):
        def _set_in_keys(self):
            calls.append(self.tensor_keys.value)

    loss = WithInKeys(make_net())
    loss._forward_value_estimator_keys()  # no estimator yet: only the in-keys are refreshed
    assert calls == ["state_value"]
    loss.value_estimator = Recorder()
    loss.set_keys(value="v")
    assert loss.value_estimator.keys == {"value": "v"} and calls[-1] == "v"

    class Overriding(Probe):  # TorchRL's subclasses override the hook with **kwargs
        def _forward_value_estimator_keys(self, **kwargs):
            calls.append(kwargs)

    Overriding(make_net()).set_keys(value="w")
    assert calls[-1] == {"value": "w"}


def test_set_keys_renames_and_forwards_to_the_value_estimator():
    class Recorder:
        def __init__(self):
            self.keys = {}

        def set_keys(self, **keys):
            self.keys.update(keys)

    loss = Probe(make_net())
    loss.value_estimator = Recorder()
    loss.set_keys(target=("next", "y"), value="v")
    assert loss.tensor_keys.target == ("next", "y")
    assert loss.value_estimator.keys == {"value": "v"}
    with pytest.raises(ValueError, match=r"unknown key name\(s\) \['bogus'\]; accepted"):
        loss.set_keys(bogus="x")


def test_registration_errors_name_the_problem():
    with pytest.raises(TypeError, match="must be an nn.Module"):
        Probe("not a module")
    with pytest.raises(TypeError, match="expand_dim needs a TensorDictModule"):
        Probe(nn.Linear(2, 2), expand_dim=2)
    with pytest.raises(ValueError, match="positive int"):
        Probe(make_net(), expand_dim=0)

    class Clash(LossModule):
        def __init__(self, net):
            super().__init__()
            self.convert_to_functional(net, "forward")

    with pytest.raises(ValueError, match="would hide"):
        Clash(make_net())
    with pytest.raises(KeyError, match="no network named 'other'"):
        Probe(make_net()).params_of("other")


def test_state_dict_round_trip_restores_targets():
    a = Probe(make_net(seed=0))
    SoftUpdate(a, tau=0.5)
    with torch.no_grad():
        a.params_of("net", target=True)["module", "0", "weight"].fill_(0.25)
    b = Probe(make_net(seed=3))
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.params_of("net", target=True)["module", "0", "weight"], torch.full((4, 3), 0.25))
    assert torch.equal(b.params_of("net")["module", "0", "weight"], a.params_of("net")["module", "0", "weight"])


def test_assigning_an_estimator_module_goes_through_the_property():
    class KeyedEstimator(nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = {}

        def set_keys(self, **keys):
            self.keys.update(keys)

    loss = Probe(make_net())
    estimator = KeyedEstimator()
    loss.value_estimator = estimator
    assert loss.value_estimator is estimator and estimator.keys == {"value": "state_value"}
    assert any(m is estimator for m in loss.modules())  # registered: .to() moves its buffers


def test_lazy_networks_must_be_initialised_first():
    net = TensorDictModule(nn.LazyLinear(2), in_keys=["x"], out_keys=["prediction"])
    with pytest.raises(ValueError, match=r"uninitialized \(lazy\) parameters.*fake_tensordict"):
        Probe(net)
    net(TensorDict(x=torch.zeros(1, 3), batch_size=[1]))
    assert Probe(net).params_of("net")["module", "weight"].shape == (2, 3)


def test_total_loss_sums_every_loss_term_and_only_those():
    w = nn.Parameter(torch.tensor([1.0, 2.0]))
    out = TensorDict(loss_a=w.sum(), loss_b=(w * w).sum(), alpha=torch.tensor(7.0), entropy=torch.tensor(3.0))
    total = total_loss(out)
    assert total.shape == () and float(total.detach()) == 3.0 + 5.0  # the diagnostics are left out
    total.backward()
    torch.testing.assert_close(w.grad, torch.tensor([1.0, 1.0]) + 2 * w.detach())
    assert float(total_loss(out, ["loss_b"])) == 5.0


def test_total_loss_errors_name_the_entries():
    with pytest.raises(KeyError, match=r"no entry whose name starts with 'loss'.*\['alpha'\]"):
        total_loss(TensorDict(alpha=torch.tensor(1.0)))
    with pytest.raises(KeyError, match=r"\['loss_c'\] are not in the loss output"):
        total_loss(TensorDict(loss_a=torch.tensor(1.0)), ["loss_c"])
    with pytest.raises(ValueError, match=r"'loss_a' must be a scalar tensor, got \(3,\)"):
        total_loss(TensorDict(loss_a=torch.ones(3)))


# ------------------------------------------------------------------ TorchRL 0.14 conformance features
def test_reading_targets_warns_until_an_updater_is_attached():
    loss = Probe(make_net())
    with pytest.warns(UserWarning, match="No target network updater has been associated with this loss module"):
        loss.params_of("net", target=True)
    with pytest.warns(UserWarning, match="No target network updater"):
        loss.target_net_params  # noqa: B018  (TorchRL's attribute, read directly)
    SoftUpdate(loss, tau=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss.params_of("net", target=True)
        loss.params_of("net")
    # no target copies: nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Probe(make_net(), target=False)(batch())


@pytest.mark.parametrize("n", [None, 3])
def test_reset_parameters_recursive_redraws_every_set_and_target(n):
    loss = Probe(make_net(), expand_dim=n)
    SoftUpdate(loss, tau=0.1)
    holders = [loss.params_of("net"), loss.params_of("net", target=True)]
    with torch.no_grad():
        for holder in holders:
            for t in holder.values(True, True):
                t.fill_(1000.0)
    ids = [id(t) for holder in holders for t in holder.values(True, True)]
    loss.reset_parameters_recursive()
    fresh = [t for holder in holders for t in holder.values(True, True)]
    assert [id(t) for t in fresh] == ids  # in place: optimizers and updaters keep their tensors
    assert all(bool((t.abs() < 1000).all()) for t in fresh)
    if n is not None:  # each set drawn anew, not n copies of one draw
        weight = loss.params_of("net")["module", "0", "weight"]
        assert not torch.equal(weight[0], weight[1])


def test_keyword_call_gathers_the_in_keys_and_returns_the_out_keys():
    class TwoTerms(Probe):
        out_keys = ["loss_mse", "gap"]

        def forward(self, td):
            out = self.call_network("net", td)
            gap = out["prediction"] - td["target"]
            return TensorDict(loss_mse=gap.pow(2).mean(), gap=gap.abs().mean().detach())

    loss = TwoTerms(make_net(), target=False)
    assert loss.in_keys == ["x", ("next", "x")]
    td = batch()
    # "target" is not an in-key of this toy loss: the call names every entry it passes
    with pytest.raises(TypeError, match=r"keyword argument\(s\) \['target'\] name no entry this loss reads"):
        loss(x=td["x"], target=td["target"])

    class Reads(TwoTerms):
        def _extra_in_keys(self):
            return ["target"]

    loss = Reads(make_net(), target=False)
    mse, gap = loss(x=td["x"], target=td["target"])
    expected = loss(td.clone())
    torch.testing.assert_close(mse, expected["loss_mse"])
    torch.testing.assert_close(gap, expected["gap"])
    assert loss.select_out_keys("gap") is loss
    assert list(loss(td.clone()).keys()) == ["gap"]
    torch.testing.assert_close(loss(x=td["x"], target=td["target"]), expected["gap"])  # one key: the tensor
    with pytest.raises(ValueError, match=r"\['nope'\] are not out keys"):
        loss.select_out_keys("nope")
    assert sorted(loss.reset_out_keys()(td.clone()).keys()) == ["gap", "loss_mse"]


def test_a_list_of_networks_is_an_ensemble_of_their_parameters():
    nets = [make_net(seed) for seed in range(3)]
    loss = Probe(nets, expand_dim=3)
    stacked = loss.params_of("net")
    for i, net in enumerate(nets):
        torch.testing.assert_close(stacked["module", "0", "weight"][i], net.module[0].weight.detach())
    out = loss.call_network("net", batch(), out_key="prediction")
    torch.testing.assert_close(out[2], nets[2](batch())["prediction"])
    with pytest.raises(ValueError, match="a list of 2 networks but 3 parameter sets"):
        Probe(nets[:2], expand_dim=3)
    odd = TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["prediction"])
    with pytest.raises(ValueError, match="must share one structure"):
        Probe([nets[0], odd], expand_dim=2)


def test_vmap_randomness_of_a_vmapped_ensemble():
    torch.manual_seed(0)
    net = TensorDictModule(
        nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 1)), in_keys=["obs"], out_keys=["prediction"]
    )
    loss = Probe(net, expand_dim=6, target=False)  # more than 4 sets: the ensemble runs through torch.vmap
    params = loss.net_params.data.clone()
    params[:] = params[0]  # six copies of one parameter set: only the dropout masks can differ
    loss.net_params.data.copy_(params)
    td = TensorDict({"obs": torch.randn(5, 3)}, [5])
    assert loss.vmap_randomness == "different"
    out = loss.call_network("net", td.clone(), out_key="prediction")
    assert out.shape == (6, 5, 1) and not torch.equal(out[0], out[1])  # each set draws its own mask
    loss.set_vmap_randomness("same")
    out = loss.call_network("net", td.clone(), out_key="prediction")
    assert all(torch.equal(out[0], out[i]) for i in range(1, 6))  # one mask for all
    loss.set_vmap_randomness("error")
    with pytest.raises(RuntimeError, match="randomness"):
        loss.call_network("net", td.clone(), out_key="prediction")
    with pytest.raises(ValueError, match="vmap_randomness"):
        loss.set_vmap_randomness("sometimes")


@pytest.mark.parametrize("n", [None, 2, 6])
def test_out_key_call_writes_the_input_as_the_network_call_does(n):
    # a plain TensorDictModule runs on the input tensors; a single network still writes its output
    # into the input (as its in-place call does), an ensemble's sets never do
    loss = Probe(make_net(), expand_dim=n)
    td = batch()
    value = loss.call_network("net", td, out_key="prediction")
    if n is None:
        assert sorted(td.keys()) == ["prediction", "target", "x"] and td["prediction"] is value
    else:
        assert sorted(td.keys()) == ["target", "x"]


def test_out_key_call_of_a_hooked_network_runs_its_hooks():
    loss = Probe(make_net(), expand_dim=2)
    seen = []
    loss.net.register_forward_hook(lambda module, args, out: seen.append(type(args[0]).__name__))
    td = batch()
    plain = Probe(make_net(), expand_dim=2).call_network("net", td.clone(), out_key="prediction")
    hooked = loss.call_network("net", td.clone(), out_key="prediction")
    assert seen == ["TensorDict", "TensorDict"]  # one TensorDict call per parameter set
    torch.testing.assert_close(hooked, plain)


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("n", [None, 3])
def test_reused_detached_params_and_target_sets_follow_in_place_updates(n, stacked):
    # detached parameters and the sets of gradient-free ensembles are made once and reused: the
    # reused views must show every in-place update, and new data (a dtype change) must replace them;
    # the stacked call (the default for this linear network) reads them afresh at every call
    loss = Probe(make_net(), expand_dim=n, target=True)
    loss.deactivate_vmap = not stacked
    td = batch()
    detached = loss._detached_params("net")
    assert loss._detached_params("net") is detached
    assert not any(t.requires_grad for t in detached.values(True, True))

    def both():  # the target copy, and the detached parameters
        return (
            loss.call_network("net", td.clone(), target=True, out_key="prediction"),
            loss.call_network("net", td.clone(), params=loss._detached_params("net"), out_key="prediction"),
        )

    def fresh():  # new tensors: nothing reused
        return (
            loss.call_network(
                "net", td.clone(), params=loss.params_of("net", target=True).clone(), out_key="prediction"
            ),
            loss.call_network("net", td.clone(), params=loss.params_of("net").detach().clone(), out_key="prediction"),
        )

    before = both()
    with torch.no_grad():
        loss.params_of("net", target=True).apply_(lambda t: t.add_(0.5))
        loss.params_of("net").apply_(lambda t: t.mul_(2.0))
    after = both()
    for old, new, expected in zip(before, after, fresh()):
        assert not torch.allclose(old, new) and torch.equal(new, expected)
    for params in (loss.params_of("net", target=True), loss.params_of("net")):  # new memory, same objects
        for leaf in params.values(True, True):
            leaf.data = leaf.data * 3.0
    for old, new, expected in zip(after, both(), fresh()):
        assert not torch.allclose(old, new) and torch.equal(new, expected)
    if n is not None and not stacked:  # other parameter tensors (a slice per call) are unbound each time, never kept
        for _ in range(3):
            loss.call_network("net", td.clone(), params=loss._detached_params("net")[:2], out_key="prediction")
        assert set(vars(loss)["_sets_cache"]) == {("net", "target"), ("net", "detached")}
    loss.double()  # new data under the same parameter objects (and the kept views dropped)
    td = td.double()
    for value, expected in zip(both(), fresh()):
        assert value.dtype == torch.float64 and torch.equal(value, expected)


def test_params_detached_in_inference_mode_are_not_kept():
    loss = Probe(make_net(), expand_dim=2, target=True)
    with torch.inference_mode():
        inferred = loss._detached_params("net")
        loss.call_network("net", batch(), target=True, out_key="prediction")
    assert loss._detached_params("net") is not inferred
    # training afterwards meets no inference tensor: the input's gradient flows through both reads
    td = batch()
    x = td["x"].requires_grad_()
    q = loss.call_network("net", td, params=loss._detached_params("net"), out_key="prediction")
    (q.sum() + loss.call_network("net", td, target=True, out_key="prediction").sum()).backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_kept_views_are_dropped_when_the_loss_moves_or_is_copied():
    import copy

    loss = Probe(make_net(), expand_dim=2, target=True)
    loss.call_network("net", batch(), target=True, out_key="prediction")
    loss._detached_params("net")
    assert {"_sets_cache", "_detached_cache"} <= set(vars(loss))
    twin = copy.deepcopy(loss)
    assert not {"_sets_cache", "_detached_cache"} & set(vars(twin))
    loss.double()
    assert not {"_sets_cache", "_detached_cache"} & set(vars(loss))


def test_a_sequence_network_on_tensors_gives_what_its_call_gives():
    """A TensorDictSequential network: an ensemble runs on the input tensors (its chained tensor
    function), a single one keeps its TensorDict call, which writes every step's output."""
    from tdict.nn import TensorDictSequential

    def sequence(seed):
        torch.manual_seed(seed)
        return TensorDictSequential(
            TensorDictModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["hidden"]),
            TensorDictModule(nn.Linear(4, 2), in_keys=["hidden"], out_keys=["prediction"]),
        )

    nets = [sequence(seed) for seed in range(2)]
    ensemble = Probe(nets, expand_dim=2, target=False)
    assert ensemble.net.tensor_function(1) is not None
    td = batch()
    out = ensemble.call_network("net", td, out_key="prediction")
    for i, net in enumerate(nets):
        torch.testing.assert_close(out[i], net(td.clone())["prediction"])
    assert "prediction" not in td.keys() and "hidden" not in td.keys()  # an ensemble writes nothing

    single = Probe(sequence(5), target=False)
    work = batch()
    value = single.call_network("net", work, out_key="prediction")
    torch.testing.assert_close(value, single.net(batch())["prediction"])
    assert "hidden" in work.keys() and torch.equal(work["prediction"], value)  # as its call writes
    untouched = batch()
    torch.testing.assert_close(single.call_network("net", untouched, out_key="prediction", write=False), value)
    assert sorted(untouched.keys()) == ["target", "x"]  # write=False: the input is left as it is
    plain = Probe(make_net(), target=False)  # a network with a tensor function: the same on tensors
    untouched = batch()
    expected = plain.net(batch())["prediction"]
    torch.testing.assert_close(plain.call_network("net", untouched, out_key="prediction", write=False), expected)
    assert sorted(untouched.keys()) == ["target", "x"]
