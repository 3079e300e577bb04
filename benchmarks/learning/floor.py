"""The floor under CPU time per frame: one gradient step, ours against SB3 and plain torch.

For each task, RL-zoo's settings (settings.py): our recipe's gradient step as its trainer runs it
(loss, backward, gradient clipping, optimizer, target update; replay sampling included), SB3's
``train()`` per gradient step, and the same math written as plain torch in this file (no
framework: tensors in, one optimizer step out; samples drawn from a preallocated batch). The three
run in one process, one thread, in alternating blocks; medians of the blocks' CPU ms per step.
Plain torch is the floor of eager PyTorch for that math: what a library spends above it is its own
overhead (modules, containers, sampling every stored key, diagnostics), and whether 0.8x SB3's CPU
per frame is reachable without compiling depends on where plain torch sits against SB3.

    hatch run bench:floor [--tasks ppo-cartpole,dqn-cartpole,sac-pendulum,td3-pendulum]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from run_ours import compose_config  # noqa: E402
from settings import TASKS  # noqa: E402
from torch import nn  # noqa: E402

import train as train_app  # noqa: E402

STEPS = 32  # gradient steps per block
WARM = {"ppo": 512, "dqn": 2_000, "sac": 2_000, "td3": 2_000}  # frames collected before timing


def mlp(sizes: list[int], act: type) -> nn.Sequential:
    layers: list = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(a, b)] + ([act()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


def plain_ppo(n: int = 256):
    """Clipped PPO on a categorical policy, minibatch 256, 64-wide tanh networks (RL-zoo CartPole)."""
    actor, critic = mlp([4, 64, 64, 2], nn.Tanh), mlp([4, 64, 64, 1], nn.Tanh)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-5, fused=True)
    obs, act, ret, adv = torch.randn(n, 4), torch.randint(0, 2, (n,)), torch.randn(n), torch.randn(n)
    old_lp = torch.full((n,), -0.69)

    def step() -> None:
        lp = torch.log_softmax(actor(obs), -1).gather(-1, act[:, None]).squeeze(-1)
        ratio, a = torch.exp(lp - old_lp), (adv - adv.mean()) / (adv.std() + 1e-8)
        loss = (
            -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
            + 0.5 * (critic(obs).squeeze(-1) - ret).pow(2).mean()
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
        opt.step()

    return step


def plain_dqn(n: int = 64, size: int = 10_000):
    """DQN: Huber loss against a target network, batch 64, 256-wide ReLU network (RL-zoo CartPole)."""
    q, target = mlp([4, 256, 256, 2], nn.ReLU), mlp([4, 256, 256, 2], nn.ReLU)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=2.3e-3, fused=True)
    obs, nxt = torch.randn(size, 4), torch.randn(size, 4)
    act, rew, done = torch.randint(0, 2, (size,)), torch.ones(size), torch.zeros(size)

    def step() -> None:
        i = torch.randint(0, size, (n,))
        with torch.no_grad():
            y = rew[i] + 0.99 * (1 - done[i]) * target(nxt[i]).max(-1).values
        loss = F.smooth_l1_loss(q(obs[i]).gather(-1, act[i, None]).squeeze(-1), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0, foreach=True)
        opt.step()

    return step


def plain_sac(n: int = 256, size: int = 10_000):
    """SAC: tanh-Gaussian actor, twin critics and their targets, learnt temperature, batch 256,
    256-wide ReLU networks, Polyak step 0.005 (RL-zoo Pendulum)."""
    actor = mlp([3, 256, 256, 2], nn.ReLU)
    critics = nn.ModuleList([mlp([4, 256, 256, 1], nn.ReLU) for _ in range(2)])
    targets = nn.ModuleList([mlp([4, 256, 256, 1], nn.ReLU) for _ in range(2)])
    targets.load_state_dict(critics.state_dict())
    log_alpha = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([*actor.parameters(), *critics.parameters(), log_alpha], lr=1e-3, fused=True)
    obs, nxt, act = torch.randn(size, 3), torch.randn(size, 3), torch.rand(size, 1) * 2 - 1
    rew, done = torch.randn(size), torch.zeros(size)
    critic_params, target_params = list(critics.parameters()), list(targets.parameters())

    def sample(o: torch.Tensor):
        mean, log_std = actor(o).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std).pow(2) - std.log() - 0.9189385).sum(-1) - (
            2 * (0.6931472 - u - F.softplus(-2 * u))
        ).sum(-1)
        return a, logp

    def q_values(nets, o, a) -> torch.Tensor:
        x = torch.cat([o, a], -1)
        return torch.stack([net(x).squeeze(-1) for net in nets])

    def step() -> None:
        i = torch.randint(0, size, (n,))
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = sample(nxt[i])
            y = rew[i] + 0.99 * (1 - done[i]) * (q_values(targets, nxt[i], a2).min(0).values - alpha * logp2)
        critic_loss = 0.5 * (q_values(critics, obs[i], act[i]) - y).pow(2).sum(0).mean()
        a, logp = sample(obs[i])
        for p in critic_params:
            p.requires_grad_(False)
        actor_loss = (alpha * logp - q_values(critics, obs[i], a).min(0).values).mean()
        for p in critic_params:
            p.requires_grad_(True)
        alpha_loss = -(log_alpha * (logp.detach() - 1.0)).mean()
        opt.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(target_params, critic_params, 0.005)

    return step


def plain_td3(n: int = 256, size: int = 10_000):
    """TD3: deterministic tanh actor scaled to [-2, 2], twin critics, targets of both, target policy
    smoothing (noise 0.2, clipped at 0.5), the actor and the targets updated every second step,
    batch 256, [400, 300] ReLU networks, Polyak step 0.005 (RL-zoo Pendulum)."""
    actor, target_actor = mlp([3, 400, 300, 1], nn.ReLU), mlp([3, 400, 300, 1], nn.ReLU)
    target_actor.load_state_dict(actor.state_dict())
    critics = nn.ModuleList([mlp([4, 400, 300, 1], nn.ReLU) for _ in range(2)])
    targets = nn.ModuleList([mlp([4, 400, 300, 1], nn.ReLU) for _ in range(2)])
    targets.load_state_dict(critics.state_dict())
    opt = torch.optim.Adam([*actor.parameters(), *critics.parameters()], lr=1e-3, fused=True)
    obs, nxt, act = torch.randn(size, 3), torch.randn(size, 3), torch.rand(size, 1) * 4 - 2
    rew, done = torch.randn(size), torch.zeros(size)
    critic_params = list(critics.parameters())
    online = [*actor.parameters(), *critic_params]
    offline = [*target_actor.parameters(), *targets.parameters()]
    calls = [0]

    def q_values(nets, o, a) -> torch.Tensor:
        x = torch.cat([o, a], -1)
        return torch.stack([net(x).squeeze(-1) for net in nets])

    def step() -> None:
        i = torch.randint(0, size, (n,))
        with torch.no_grad():
            noise = (torch.randn(n, 1) * 0.2).clamp(-0.5, 0.5)
            a2 = (2 * torch.tanh(target_actor(nxt[i])) + noise).clamp(-2, 2)
            y = rew[i] + 0.98 * (1 - done[i]) * q_values(targets, nxt[i], a2).min(0).values
        loss = 0.5 * (q_values(critics, obs[i], act[i]) - y).pow(2).sum(0).mean()
        calls[0] += 1
        delayed = calls[0] % 2 == 0
        if delayed:
            for p in critic_params:
                p.requires_grad_(False)
            loss = loss - critics[0](torch.cat([obs[i], 2 * torch.tanh(actor(obs[i]))], -1)).mean()
            for p in critic_params:
                p.requires_grad_(True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if delayed:
            with torch.no_grad():
                torch._foreach_lerp_(offline, online, 0.005)

    return step


PLAIN = {"ppo": plain_ppo, "dqn": plain_dqn, "sac": plain_sac, "td3": plain_td3}


def our_step(task_name: str):
    """Our recipe's trainer after WARM collected frames; returns (one block of STEPS gradient steps)."""
    task = TASKS[task_name]
    recipe, box = train_app.RECIPES[task.algo], {}

    class Captured(Exception):
        pass

    def capture(run, trainer):
        box["trainer"] = trainer
        raise Captured

    recipe.resume_if_asked = capture
    cfg = compose_config(task, 0, False, "/tmp/rl-floor", f"floor-{time.time()}", extra=(f"logger.eval_every={10**9}",))
    try:
        recipe.train(cfg)
    except Captured:
        pass
    trainer, batches = box["trainer"], iter(box["trainer"].collector)
    batch = None
    while trainer.collected_frames < WARM[task.algo]:
        batch = next(batches)
        trainer.collected_frames += batch.numel()
        batch = trainer._run_td_ops("batch_process", batch)
    trainer.optim_steps_per_batch = STEPS
    return lambda: trainer.optim_steps(batch)


def sb3_step(task_name: str):
    """SB3's model after WARM collected frames; returns (one ``train()`` of STEPS gradient steps)."""
    import run_sb3

    task = TASKS[task_name]
    if task.algo == "ppo":  # train() makes one pass over the rollout: STEPS minibatches of 256
        model = run_sb3.make_model(task, 0, n_epochs=1, batch_size=256, n_steps=STEPS * 256 // task.n_envs)
        model.learn(WARM[task.algo])
        return model.train
    model = run_sb3.make_model(task, 0, learning_starts=min(task.sb3.get("learning_starts", 100), 1_000))
    model.learn(WARM[task.algo])
    return lambda: model.train(STEPS, task.sb3.get("batch_size", 256))


def timed(fn, steps: int) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="ppo-cartpole,dqn-cartpole,sac-pendulum,td3-pendulum")
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "learning_floor.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = {}
    for task_name in args.tasks.split(","):
        algo = TASKS[task_name].algo
        plain = PLAIN[algo]()
        runs = {
            "ours": our_step(task_name),
            "sb3": sb3_step(task_name),
            "plain torch": lambda: [plain() for _ in range(STEPS)],
        }
        times: dict = {name: [] for name in runs}
        for block in range(args.blocks + 1):
            for name, fn in runs.items():
                ms = timed(fn, STEPS)
                if block:  # the first block warms up
                    times[name].append(ms)
        rows[task_name] = {name: statistics.median(v) for name, v in times.items()}
        r = rows[task_name]
        print(
            f"{task_name}: CPU ms per gradient step: ours {r['ours']:.3f}, SB3 {r['sb3']:.3f}, plain torch {r['plain torch']:.3f} "
            f"(ours/SB3 {r['ours'] / r['sb3']:.2f}x, plain/SB3 {r['plain torch'] / r['sb3']:.2f}x)",
            flush=True,
        )
    Path(args.out).write_text(
        json.dumps(
            {
                "command": " ".join(["python", str(Path(__file__).resolve().relative_to(REPO)), *sys.argv[1:]]),
                "ms_per_gradient_step": rows,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
