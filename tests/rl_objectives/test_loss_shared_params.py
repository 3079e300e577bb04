"""Parameters one network shares with another (``compare_against``), and stateful copies of networks.

A network registered with ``compare_against`` holds the shared entries in ``<name>_params`` as
detached views of the owner's parameters (expanded over an ensemble's sets): they follow the owner's
updates, conversions, copies and checkpoints, and only the owner trains them.
"""

import copy

import pytest
import torch
from torch import nn

from rl_objectives import LossModule
from tdict import TensorDict
from tdict.nn import Buffer, TensorDictModule, TensorDictSequential

TRUNK = ("module", "0", "module", "weight")
HEAD = ("module", "1", "module", "weight")


class ActorCritic(LossModule):
    def __init__(self, sets=None):
        super().__init__()
        torch.manual_seed(0)
        trunk = TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=["hidden"])
        actor = TensorDictSequential(trunk, TensorDictModule(nn.Linear(4, 2), in_keys=["hidden"], out_keys=["action"]))
        critic = TensorDictSequential(trunk, TensorDictModule(nn.Linear(4, 1), in_keys=["hidden"], out_keys=["value"]))
        self.convert_to_functional(actor, "actor")
        self.convert_to_functional(
            critic, "critic", expand_dim=sets, create_target_params=True, compare_against=actor.parameters()
        )

    def forward(self, td):
        value = self.call_network("critic", td.copy(), out_key="value")
        action = self.call_network("actor", td.copy(), out_key="action")
        return TensorDict(loss_critic=value.pow(2).mean(), loss_actor=action.pow(2).mean())


def expected_view(owner, sets):
    return owner.detach() if sets is None else owner.detach().expand(sets, *owner.shape)


@pytest.mark.parametrize("sets", [None, 3])
def test_shared_entries_are_detached_views_of_the_owner(sets):
    loss = ActorCritic(sets)
    owner, shared = loss.actor_params[TRUNK], loss.critic_params[TRUNK]
    assert isinstance(owner, nn.Parameter) and not isinstance(shared, nn.Parameter)
    assert isinstance(shared, Buffer) and not shared.requires_grad
    assert shared.data_ptr() == owner.data_ptr()
    torch.testing.assert_close(shared, expected_view(owner, sets))
    # the critic's own head is trained through the critic: a parameter (one set per member)
    assert isinstance(loss.critic_params[HEAD], nn.Parameter)
    assert loss.critic_params[HEAD].shape == ((1, 4) if sets is None else (sets, 1, 4))
    # trainable: the actor's 4 tensors and the critic's head (weight, bias); the trunk once
    assert len([p for p in loss.parameters() if p.requires_grad]) == 6


@pytest.mark.parametrize("sets", [None, 3])
def test_only_the_owner_trains_the_shared_entries(sets):
    loss = ActorCritic(sets)
    td = TensorDict(obs=torch.randn(5, 3), batch_size=[5])
    loss(td)["loss_critic"].backward()
    assert loss.actor_params[TRUNK].grad is None  # the critic's loss sends nothing into the trunk
    assert loss.critic_params[HEAD].grad is not None
    opt = torch.optim.SGD(loss.parameters(), lr=0.5)
    opt.zero_grad()
    loss(td)["loss_actor"].backward()
    opt.step()  # the trunk moves: the critic's view follows
    torch.testing.assert_close(loss.critic_params[TRUNK], expected_view(loss.actor_params[TRUNK], sets))


@pytest.mark.parametrize("dest", [torch.float64, torch.float16, "cpu"])
@pytest.mark.parametrize("sets", [None, 2])
def test_conversion_keeps_the_objects_and_the_views(sets, dest):
    loss = ActorCritic(sets)
    params, buffers = set(loss.parameters()), set(loss.buffers())
    loss.to(dest)
    assert set(loss.parameters()) == params and set(loss.buffers()) == buffers
    owner, shared = loss.actor_params[TRUNK], loss.critic_params[TRUNK]
    assert shared.dtype == owner.dtype == (dest if isinstance(dest, torch.dtype) else torch.float32)
    assert shared.data_ptr() == owner.data_ptr() and isinstance(shared, Buffer)
    with torch.no_grad():
        owner.add_(1.0)
    torch.testing.assert_close(shared, expected_view(owner, sets))


@pytest.mark.parametrize("sets", [None, 2])
def test_a_deep_copy_shares_with_its_own_owner(sets):
    loss = copy.deepcopy(ActorCritic(sets))
    owner, shared = loss.actor_params[TRUNK], loss.critic_params[TRUNK]
    assert shared.data_ptr() == owner.data_ptr()
    with torch.no_grad():
        owner.mul_(0.0)
    assert (loss.critic_params[TRUNK] == 0).all()


@pytest.mark.parametrize("sets", [None, 2])
def test_checkpoints_load_strictly_and_leave_the_views_alone(sets):
    source, loaded = ActorCritic(sets), ActorCritic(sets)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p))
    state = source.state_dict()
    loaded.load_state_dict(state)  # strict, with the shared entries in the checkpoint
    for key in source.actor_params.keys(True, True):
        torch.testing.assert_close(loaded.actor_params[key], source.actor_params[key])
    torch.testing.assert_close(loaded.critic_params[HEAD], source.critic_params[HEAD])
    assert loaded.critic_params[TRUNK].data_ptr() == loaded.actor_params[TRUNK].data_ptr()
    # a checkpoint without them (they are the owner's) loads strictly too
    shared = [k for k in state if k.startswith("critic_params.module.0.")]
    assert len(shared) == 2
    ActorCritic(sets).load_state_dict({k: v for k, v in state.items() if k not in shared})
    # inside a bigger module, under its prefix
    outer_source, outer = nn.ModuleDict({"loss": source}), nn.ModuleDict({"loss": ActorCritic(sets)})
    outer.load_state_dict(
        {k: v for k, v in outer_source.state_dict().items() if not k.startswith("loss.critic_params.module.0.")}
    )
    torch.testing.assert_close(outer["loss"].critic_params[HEAD], source.critic_params[HEAD])


def test_reset_leaves_the_shared_entries_to_their_owner():
    loss = ActorCritic(3)
    trunk = loss.actor_params[TRUNK].detach().clone()
    head = loss.critic_params[HEAD].detach().clone()
    loss.actor_params[TRUNK].data.fill_(7.0)
    loss.reset_parameters_recursive()  # redraws the actor's trunk once, as the actor's
    assert not (loss.actor_params[TRUNK] == 7.0).any()
    torch.testing.assert_close(loss.critic_params[TRUNK], expected_view(loss.actor_params[TRUNK], 3))
    assert not torch.equal(loss.critic_params[HEAD], head)
    assert not torch.equal(loss.actor_params[TRUNK], trunk)


def test_stateful_net_round_trip():
    loss = ActorCritic(None)
    assert loss.get_stateful_net("actor", copy=False) is loss.actor
    net = loss.get_stateful_net("actor")
    assert net is not loss.actor
    with torch.no_grad():  # writing into the copy's tensors writes into the loss
        net.module[1].module.bias.fill_(0.5)
    assert (loss.actor_params["module", "1", "module", "bias"] == 0.5).all()
    net.module[1].module.bias = nn.Parameter(torch.full((2,), 2.0))  # a new tensor: the loss keeps its own
    assert (loss.actor_params["module", "1", "module", "bias"] == 0.5).all()
    assert loss.from_stateful_net("actor", net) is loss
    assert (loss.actor_params["module", "1", "module", "bias"] == 2.0).all()
    with pytest.raises(KeyError, match=r"from_stateful_net: actor holds .*module.*that the module lacks"):
        loss.from_stateful_net("actor", nn.Linear(3, 4))


def test_stateful_net_of_an_ensemble_holds_the_stacked_sets():
    loss = ActorCritic(3)
    net = loss.get_stateful_net("critic")
    assert net.module[1].module.weight.shape == (3, 1, 4)
    assert net.module[1].module.weight is loss.critic_params[HEAD]
    fresh = copy.deepcopy(net)
    fresh.module[1].module.weight = nn.Parameter(torch.ones(3, 1, 4))
    with torch.no_grad():
        fresh.module[0].module.weight.fill_(9.0)  # the trunk is the actor's: not copied back
    loss.from_stateful_net("critic", fresh)
    assert (loss.critic_params[HEAD] == 1).all()
    assert not (loss.actor_params[TRUNK] == 9.0).any()
