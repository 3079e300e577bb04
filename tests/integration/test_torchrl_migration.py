"""TorchRL's PPO tutorial, with only the imports changed, runs on this project's packages.

The code below follows the structure and calls of TorchRL's "Reinforcement Learning (PPO) with
TorchRL" tutorial (GymEnv + ObservationNorm/DoubleToFloat/StepCounter, a TanhNormal
ProbabilisticActor, ValueOperator, Collector, ReplayBuffer with SamplerWithoutReplacement, GAE,
ClipPPOLoss, a deterministic evaluation rollout), on Pendulum-v1 and a few small batches.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("gymnasium")


def test_ppo_tutorial_runs_with_changed_imports():
    from rl_collect import Collector
    from rl_envs import Compose, DoubleToFloat, GymEnv, ObservationNorm, StepCounter, TransformedEnv
    from rl_envs.utils import ExplorationType, check_env_specs, set_exploration_type
    from rl_objectives import ClipPPOLoss
    from rl_objectives.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from rl_objectives.value import GAE
    from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from tdict.nn import NormalParamExtractor, TensorDictModule

    torch.manual_seed(0)
    num_cells, frames_per_batch, total_frames, sub_batch_size, num_epochs = 32, 200, 600, 50, 2

    base_env = GymEnv("Pendulum-v1")
    env = TransformedEnv(
        base_env,
        Compose(ObservationNorm(in_keys=["observation"]), DoubleToFloat(), StepCounter()),
    )
    env.transform[0].init_stats(num_iter=100, reduce_dim=0, cat_dim=0)
    check_env_specs(env)

    actor_net = nn.Sequential(
        nn.LazyLinear(num_cells),
        nn.Tanh(),
        nn.LazyLinear(num_cells),
        nn.Tanh(),
        nn.LazyLinear(2 * env.action_spec.shape[-1]),
        NormalParamExtractor(),
    )
    policy_module = TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"])
    policy_module = ProbabilisticActor(
        module=policy_module,
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
        return_log_prob=True,
    )
    value_net = nn.Sequential(nn.LazyLinear(num_cells), nn.Tanh(), nn.LazyLinear(1))
    value_module = ValueOperator(module=value_net, in_keys=["observation"])
    policy_module(env.reset())
    value_module(env.reset())

    collector = Collector(
        env, policy_module, frames_per_batch=frames_per_batch, total_frames=total_frames, split_trajs=False
    )
    replay_buffer = ReplayBuffer(
        storage=LazyTensorStorage(max_size=frames_per_batch), sampler=SamplerWithoutReplacement()
    )
    advantage_module = GAE(gamma=0.99, lmbda=0.95, value_network=value_module, average_gae=True)
    loss_module = ClipPPOLoss(
        actor_network=policy_module,
        critic_network=value_module,
        clip_epsilon=0.2,
        entropy_bonus=True,
        entropy_coeff=1e-4,
        critic_coeff=1.0,
        loss_critic_type="smooth_l1",
    )
    optim = torch.optim.Adam(loss_module.parameters(), 3e-4)

    batches = 0
    for tensordict_data in collector:
        assert tensordict_data.batch_size == (frames_per_batch,)
        for _ in range(num_epochs):
            advantage_module(tensordict_data)
            assert tensordict_data["advantage"].shape == (frames_per_batch,)  # no trailing 1 here
            replay_buffer.extend(tensordict_data.reshape(-1))
            for _ in range(frames_per_batch // sub_batch_size):
                subdata = replay_buffer.sample(sub_batch_size)
                loss_vals = loss_module(subdata)
                loss_value = loss_vals["loss_objective"] + loss_vals["loss_critic"] + loss_vals["loss_entropy"]
                assert torch.isfinite(loss_value)
                loss_value.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 1.0)
                optim.step()
                optim.zero_grad()
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            eval_rollout = env.rollout(50, policy_module)
            assert eval_rollout["next", "reward"].shape == (50,)
            assert bool((eval_rollout["action"].abs() <= 2.0).all())
        batches += 1
    collector.shutdown()
    assert batches == total_frames // frames_per_batch


def test_dqn_tutorial_runs_with_changed_imports():
    """TorchRL's DQN "getting started" flow: MLP + QValueModule + EGreedyModule, DQNLoss, SoftUpdate."""
    from rl_collect import Collector
    from rl_envs import GymEnv, StepCounter, TransformedEnv
    from rl_objectives import DQNLoss, SoftUpdate
    from rl_objectives.modules import MLP, EGreedyModule, QValueModule
    from rl_replay import LazyTensorStorage, ReplayBuffer
    from tdict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.set_seed(0)
    value_mlp = MLP(out_features=env.action_spec.shape[-1], num_cells=[64, 64])
    value_net = TensorDictModule(value_mlp, in_keys=["observation"], out_keys=["action_value"])
    policy = TensorDictSequential(value_net, QValueModule(spec=env.action_spec))
    exploration_module = EGreedyModule(env.action_spec, annealing_num_steps=1_000, eps_init=0.5)
    policy_explore = TensorDictSequential(policy, exploration_module)

    init_rand_steps, frames_per_batch, optim_steps = 100, 50, 5
    collector = Collector(
        env, policy_explore, frames_per_batch=frames_per_batch, total_frames=400, init_random_frames=init_rand_steps
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
    loss = DQNLoss(value_network=policy, action_space=env.action_spec, delay_value=True)
    optim = torch.optim.Adam(loss.parameters(), lr=0.02)
    updater = SoftUpdate(loss, eps=0.99)

    eps_before = float(exploration_module.eps)
    updates = 0
    for data in collector:
        rb.extend(data)
        if len(rb) > init_rand_steps:
            for _ in range(optim_steps):
                sample = rb.sample(32)
                loss_vals = loss(sample)
                assert loss_vals["loss"].shape == () and torch.isfinite(loss_vals["loss"])
                loss_vals["loss"].backward()
                optim.step()
                optim.zero_grad()
                exploration_module.step(data.numel())
                updater.step()
                updates += 1
    collector.shutdown()
    assert len(rb) == 400 and updates > 0
    assert float(exploration_module.eps) < eps_before  # annealed


def test_multiagent_ppo_tutorial_runs_with_changed_imports():
    """TorchRL's multi-agent PPO tutorial (VMAS navigation, MultiAgentMLP policy and critic, MAPPO)."""
    pytest.importorskip("vmas")
    from rl_collect import Collector
    from rl_envs import RewardSum, TransformedEnv, VmasEnv
    from rl_envs.utils import check_env_specs
    from rl_objectives import ClipPPOLoss, ValueEstimators
    from rl_objectives.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
    from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from tdict.nn import NormalParamExtractor, TensorDictModule

    torch.manual_seed(0)
    num_vmas_envs, max_steps, n_agents = 4, 20, 2
    frames_per_batch, minibatch_size = num_vmas_envs * max_steps, 40
    env = VmasEnv(
        scenario="navigation",
        num_envs=num_vmas_envs,
        continuous_actions=True,
        max_steps=max_steps,
        n_agents=n_agents,
        seed=0,
    )
    env = TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")]))
    check_env_specs(env)

    obs_dim = env.observation_spec["agents", "observation"].shape[-1]
    policy_net = torch.nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=obs_dim,
            n_agent_outputs=2 * env.action_spec.shape[-1],
            n_agents=env.n_agents,
            centralised=False,
            share_params=True,
            depth=2,
            num_cells=32,
            activation_class=torch.nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    policy_module = TensorDictModule(
        policy_net, in_keys=[("agents", "observation")], out_keys=[("agents", "loc"), ("agents", "scale")]
    )
    policy = ProbabilisticActor(
        module=policy_module,
        spec=env.action_spec_unbatched,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[env.action_key],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": env.full_action_spec_unbatched[env.action_key].space.low,
            "high": env.full_action_spec_unbatched[env.action_key].space.high,
        },
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=1,
        n_agents=env.n_agents,
        centralised=True,
        share_params=True,
        depth=2,
        num_cells=32,
        activation_class=torch.nn.Tanh,
    )
    # the one change besides imports: per-step values carry no trailing 1 here (DESIGN), so the
    # critic's [.., n_agents, 1] head is flattened (ValueOperator would squeeze it by itself)
    critic_net = torch.nn.Sequential(critic_net, torch.nn.Flatten(-2))
    critic = TensorDictModule(
        module=critic_net, in_keys=[("agents", "observation")], out_keys=[("agents", "state_value")]
    )

    collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=2 * frames_per_batch)
    replay_buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch), sampler=SamplerWithoutReplacement(), batch_size=minibatch_size
    )
    loss_module = ClipPPOLoss(
        actor_network=policy, critic_network=critic, clip_epsilon=0.2, entropy_coeff=1e-4, normalize_advantage=False
    )
    # as in TorchRL 0.14's tutorial: the log-prob key, ("agents", "action_log_prob"), comes from the actor
    assert loss_module.tensor_keys.sample_log_prob == ("agents", "action_log_prob")
    loss_module.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    gae = loss_module.value_estimator
    optim = torch.optim.Adam(loss_module.parameters(), 3e-4)

    for tensordict_data in collector:
        # the tutorial expands the team done flags per agent; this wrapper already gives them per agent
        shape = tensordict_data.get_item_shape(("next", env.reward_key))
        assert shape == (num_vmas_envs, max_steps, n_agents)
        tensordict_data.set(
            ("next", "agents", "done"), tensordict_data.get(("next", "done")).unsqueeze(-1).expand(shape)
        )
        tensordict_data.set(
            ("next", "agents", "terminated"), tensordict_data.get(("next", "terminated")).unsqueeze(-1).expand(shape)
        )
        with torch.no_grad():
            gae(tensordict_data, params=loss_module.critic_network_params)
        assert tensordict_data["advantage"].shape == shape  # at the root, as in TorchRL (one per agent)
        replay_buffer.extend(tensordict_data.reshape(-1))
        for _ in range(frames_per_batch // minibatch_size):
            subdata = replay_buffer.sample()
            loss_vals = loss_module(subdata)
            loss_value = loss_vals["loss_objective"] + loss_vals["loss_critic"] + loss_vals["loss_entropy"]
            assert torch.isfinite(loss_value)
            loss_value.backward()
            torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 1.0)
            optim.step()
            optim.zero_grad()
        collector.update_policy_weights_()
    collector.shutdown()


def test_td3_with_gaussian_exploration_runs_with_changed_imports():
    """TD3 as TorchRL's examples build it: deterministic actor + AdditiveGaussianModule, twin critics."""
    from rl_collect import Collector
    from rl_envs import DoubleToFloat, GymEnv, TransformedEnv
    from rl_objectives import SoftUpdate, TD3Loss
    from rl_objectives.modules import MLP, AdditiveGaussianModule, TanhModule, ValueOperator
    from rl_replay import LazyTensorStorage, ReplayBuffer
    from tdict.nn import InteractionType, TensorDictModule, TensorDictSequential, set_interaction_type

    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat())
    env.set_seed(0)
    action_spec = env.action_spec
    actor = TensorDictSequential(
        TensorDictModule(
            MLP(num_cells=[32, 32], out_features=action_spec.shape[-1]), in_keys=["observation"], out_keys=["param"]
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
    )
    qvalue = ValueOperator(MLP(num_cells=[32, 32], out_features=1), in_keys=["observation", "action"])
    exploration = AdditiveGaussianModule(spec=action_spec, annealing_num_steps=500, sigma_init=1.0, sigma_end=0.1)
    policy = TensorDictSequential(actor, exploration)
    with torch.no_grad():  # as TorchRL's examples do: a fake step gives the lazy layers their shapes
        fake = env.fake_tensordict()
        actor(fake)
        qvalue(fake)
    collector = Collector(env, policy, frames_per_batch=50, total_frames=300, init_random_frames=100)
    loss = TD3Loss(
        actor_network=actor, qvalue_network=qvalue, action_spec=action_spec, num_qvalue_nets=2, loss_function="l2"
    )
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, eps=0.995)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    rb = ReplayBuffer(storage=LazyTensorStorage(1_000), batch_size=32)
    for data in collector:
        rb.extend(data)
        exploration.step(data.numel())
        for _ in range(4):
            out = loss(rb.sample())
            total = out["loss_actor"] + out["loss_qvalue"]
            assert torch.isfinite(total)
            optim.zero_grad()
            total.backward()
            optim.step()
            updater.step()
    collector.shutdown()
    with set_interaction_type(InteractionType.DETERMINISTIC), torch.no_grad():
        rollout = env.rollout(20, policy)
    assert bool((rollout["action"].abs() <= 2.0).all())


def test_recurrent_dqn_tutorial_runs_with_changed_imports():
    """TorchRL's recurrent DQN tutorial: LSTMModule in step mode to collect, in sequence mode to learn."""
    from rl_collect import Collector
    from rl_envs import Compose, GymEnv, InitTracker, StepCounter, TensorDictPrimer, TransformedEnv
    from rl_objectives import DQNLoss, SoftUpdate
    from rl_objectives.modules import MLP, EGreedyModule, LSTMModule, QValueModule
    from rl_replay import LazyMemmapStorage, TensorDictReplayBuffer
    from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq

    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("CartPole-v1"), Compose(StepCounter(), InitTracker()))
    env.set_seed(0)
    feature = Mod(MLP(in_features=4, out_features=16, num_cells=[16]), in_keys=["observation"], out_keys=["embed"])
    lstm = LSTMModule(input_size=16, hidden_size=32, in_key="embed", out_key="embed")
    # the one change besides imports: TorchRL's lstm.make_tensordict_primer() needs rl-envs, which
    # rl-objectives does not import; the primer is built from the module's state spec instead
    env.append_transform(TensorDictPrimer(lstm.recurrent_state_spec()))
    mlp = Mod(MLP(in_features=32, out_features=2, num_cells=[32]), in_keys=["embed"], out_keys=["action_value"])
    qval = QValueModule(spec=env.action_spec)
    stoch_policy = Seq(
        Seq(feature, lstm, mlp, qval), EGreedyModule(annealing_num_steps=1_000, spec=env.action_spec, eps_init=0.2)
    )
    policy = Seq(feature, lstm.set_recurrent_mode(True), mlp, qval)
    loss_fn = DQNLoss(policy, action_space=env.action_spec, delay_value=True)
    updater = SoftUpdate(loss_fn, eps=0.95)
    optim = torch.optim.Adam(policy.parameters(), lr=3e-4)
    collector = Collector(env, stoch_policy, frames_per_batch=50, total_frames=200)
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(100), batch_size=4)
    for data in collector:
        assert data["recurrent_state_h"].shape == (50, 1, 32)
        assert data["recurrent_state_h"][1:].abs().sum() > 0  # the state travels from step to step
        rb.extend(data.unsqueeze(0))  # whole 50-step sequences
        s = rb.sample()
        assert s.batch_size == (4, 50)
        loss_vals = loss_fn(s)
        assert torch.isfinite(loss_vals["loss"])
        loss_vals["loss"].backward()
        optim.step()
        optim.zero_grad()
        updater.step()
        stoch_policy[1].step(data.numel())
        collector.update_policy_weights_()
    collector.shutdown()


def test_ddpg_with_ou_noise_runs_with_changed_imports():
    """DDPG as TorchRL's examples build it: TanhModule actor, OrnsteinUhlenbeckProcessModule (needs
    InitTracker's "is_init"), DDPGLoss with a target critic."""
    from rl_collect import Collector
    from rl_envs import Compose, DoubleToFloat, GymEnv, InitTracker, TransformedEnv
    from rl_objectives import DDPGLoss, SoftUpdate
    from rl_objectives.modules import MLP, OrnsteinUhlenbeckProcessModule, TanhModule, ValueOperator
    from rl_replay import LazyTensorStorage, ReplayBuffer
    from tdict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("Pendulum-v1"), Compose(DoubleToFloat(), InitTracker()))
    env.set_seed(0)
    spec = env.action_spec
    actor = TensorDictSequential(
        TensorDictModule(
            MLP(in_features=3, num_cells=[32], out_features=1), in_keys=["observation"], out_keys=["param"]
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=spec),
    )
    qvalue = ValueOperator(MLP(in_features=4, num_cells=[32], out_features=1), in_keys=["observation", "action"])
    noise = OrnsteinUhlenbeckProcessModule(spec=spec, annealing_num_steps=1_000)
    collector = Collector(env, TensorDictSequential(actor, noise), frames_per_batch=50, total_frames=200)
    loss = DDPGLoss(actor_network=actor, value_network=qvalue, loss_function="l2", delay_value=True)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, eps=0.99)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    rb = ReplayBuffer(storage=LazyTensorStorage(500), batch_size=32)
    for i, data in enumerate(collector):
        assert bool(data["is_init"][0]) == (i == 0)  # only the first batch starts an episode (Pendulum runs 200 steps)
        assert bool((data["action"].abs() <= 2.0).all())
        rb.extend(data)
        for _ in range(4):
            out = loss(rb.sample())
            total = out["loss_actor"] + out["loss_value"]
            assert torch.isfinite(total)
            optim.zero_grad()
            total.backward()
            optim.step()
            updater.step()
        noise.step(data.numel())
    collector.shutdown()
