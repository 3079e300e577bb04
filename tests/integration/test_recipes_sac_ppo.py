"""The SAC and PPO recipes and the training command (examples/train.py).

Fast: a short run of each recipe writes its run folder (resolved config, CSV scalars, checkpoint,
learning curve) and a finite return; the Hydra app composes the groups, takes overrides, runs a
multirun over seeds into one folder per job, and refuses to overwrite a finished run; PPO's clip
range and learning rate decay as scheduled. Slow: each preset reaches its threshold.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from recipes import ppo, sac, td3  # noqa: E402
from recipes.config import CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.envs import Normalization, make_env  # noqa: E402


def _quick(recipe, env: str, tmp_path: Path, **collector) -> TrainConfig:
    return TrainConfig(
        algo=recipe.Config(),
        env=EnvConfig(name=env, eval_envs=2),
        collector=CollectorConfig(**collector),
        logger=LoggerConfig(backends=["csv"], eval_every=collector["total_frames"], progress=False),
        runs_dir=str(tmp_path),
        name="quick",
    )


def test_sac_quick_run_writes_its_run_folder(tmp_path: Path) -> None:
    final = sac.train(_quick(sac, "pendulum", tmp_path, total_frames=512, init_random_frames=256))
    assert math.isfinite(final) and -16.3 * 200 <= final <= 0.0
    run = tmp_path / "quick"
    for file in (
        "config.json",
        "checkpoint.pt",
        "learning_curve.png",
        "scalars/total_r_evaluation.csv",
        "hparams.json",
    ):
        assert (run / file).is_file(), file
    config = json.loads((run / "config.json").read_text())
    assert config["recipe"] == "sac" and config["algo"]["lr"] == 5e-4 and config["collector"]["frames_per_batch"] == 64
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["collected_frames"] == 512 and set(ckpt["replay_buffer"]) == {"__dumped_to__"}


def test_sac_actor_ema_is_the_average_of_the_trained_actor(tmp_path: Path, monkeypatch) -> None:
    """algo.actor_ema: the evaluated (and saved) actor is the exponential moving average of the trained one."""
    seen = {}
    finish = sac.finish

    def capture(run, trainer, policy, **kwargs):
        seen["eval"], seen["trained"] = policy, trainer.loss_module.actor_network
        return finish(run, trainer, policy, **kwargs)

    monkeypatch.setattr(sac, "finish", capture)
    cfg = _quick(sac, "pendulum", tmp_path, total_frames=256, init_random_frames=128)
    cfg.algo.actor_ema = 0.9
    assert math.isfinite(sac.train(cfg))
    averaged, trained = list(seen["eval"].parameters()), list(seen["trained"].parameters())
    assert seen["eval"] is not seen["trained"] and not any(p.requires_grad for p in averaged)
    assert all(a.shape == t.shape for a, t in zip(averaged, trained))
    assert any(not torch.equal(a, t) for a, t in zip(averaged, trained))  # it lags the trained weights
    ckpt = torch.load(tmp_path / "quick" / "checkpoint.pt", weights_only=True)
    saved = list(ckpt["policy"].values())
    assert all(torch.equal(s, a) for s, a in zip(saved, averaged))  # the checkpoint keeps the average


def test_sac_quick_run_points_the_satellite_with_macro_actions(tmp_path: Path) -> None:
    """env=satellite: the policy's action is the slew macro's goal (3 numbers), each step 10 physics steps."""
    pytest.importorskip("mujoco")
    env = make_env(EnvConfig(name="satellite", num_envs=2))
    assert env.action_spec.shape == (2, 3)
    final = sac.train(_quick(sac, "satellite", tmp_path, total_frames=64, frames_per_batch=32, init_random_frames=32))
    assert math.isfinite(final) and -2 * 200 * math.pi <= final < 0.0


def test_ppo_quick_run_decays_lr_and_clip_range(tmp_path: Path) -> None:
    final = ppo.train(_quick(ppo, "cartpole", tmp_path, total_frames=1024, frames_per_batch=256))
    assert math.isfinite(final) and 0 < final <= 500
    ckpt = torch.load(tmp_path / "quick" / "checkpoint.pt", weights_only=True)
    # 4 batches of 256 frames out of a 1,024-frame run: the linear decay ends at 0
    assert ckpt["lr_scheduler"]["last_epoch"] == 4 and ckpt["lr_scheduler"]["_last_lr"] == [0.0]
    assert float(ckpt["loss_module"]["clip_epsilon"]) == pytest.approx(1e-3)  # the floor of the decayed clip range


def _still(td):
    return td.set("action", torch.zeros(td.batch_size + (1,)))


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "tanh-normal"])
def test_ppo_networks_take_sb3_orthogonal_initialisation(discrete: bool) -> None:
    """SB3's ortho_init: each weight matrix is orthogonal times its gain (W W^T = gain^2 I, rows of
    the wide matrices), sqrt(2) in the hidden layers, 0.01 at the policy's output, 1 at the value's;
    biases zero. ``ortho_init=False`` keeps torch's default (uniform) initialisation."""
    env = make_env(EnvConfig(name="cartpole" if discrete else "pendulum"), 1)
    spec, obs_dim = env.action_spec_unbatched, env.observation_spec_unbatched["observation"].shape[-1]
    for net, last_gain in ((ppo.make_actor(obs_dim, spec, 16), 0.01), (ppo.make_critic(obs_dim, 16), 1.0)):
        linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
        assert len(linears) == 3
        for i, layer in enumerate(linears):
            gain = last_gain if i == 2 else math.sqrt(2)
            w = layer.weight.detach()
            gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            torch.testing.assert_close(gram, gain**2 * torch.eye(min(w.shape)), atol=1e-5, rtol=1e-5)
            assert torch.count_nonzero(layer.bias) == 0
    plain = ppo.make_actor(obs_dim, spec, 16, ortho_init=False)
    assert torch.count_nonzero([m for m in plain.modules() if isinstance(m, torch.nn.Linear)][0].bias) > 0


def test_normalization_shares_frozen_observation_statistics_with_evaluation() -> None:
    cfg = EnvConfig(name="pendulum", num_envs=2)
    norm = Normalization(cfg, gamma=0.9)
    train_env, eval_env, raw_env = norm.training(make_env(cfg)), norm.evaluation(make_env(cfg, 3)), make_env(cfg, 3)
    train_env.set_seed(0)
    trained = train_env.rollout(30, break_when_any_done=False)
    s, q, n = (norm.stats[f"observation_{x}"].clone() for x in ("sum", "ssq", "count"))
    assert float(n) == 2 * 31  # 30 steps and the first reset of 2 sub-envs
    assert trained["next", "reward"].abs().max() <= 10.0 and trained["next", "observation"].abs().max() <= 10.0
    eval_env.set_seed(7)
    raw_env.set_seed(7)
    evaluated, raw = eval_env.rollout(20, _still), raw_env.rollout(20, _still)
    # evaluation: the training statistics, frozen, and the task's own rewards
    assert torch.equal(norm.stats["observation_count"], n) and torch.equal(norm.stats["observation_sum"], s)
    mean = s / n
    std = (q / n - mean**2).clamp_min(1e-8).sqrt()
    expected = ((raw["next", "observation"].double() - mean) / std).clamp(-10, 10).float()
    torch.testing.assert_close(evaluated["next", "observation"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(evaluated["next", "reward"], raw["next", "reward"])


def test_ppo_normalized_run_checkpoints_the_statistics(tmp_path: Path) -> None:
    cfg = _quick(ppo, "pendulum", tmp_path, total_frames=512, frames_per_batch=256)
    cfg.algo.normalize, cfg.algo.epochs = True, 1
    assert math.isfinite(ppo.train(cfg))
    ckpt = torch.load(tmp_path / "quick" / "checkpoint.pt", weights_only=True)
    saved = ckpt["collector"]["env"]
    counts = [v for k, v in saved.items() if k.endswith("_extra_state") and isinstance(v, dict) and "2" in v]
    assert len(counts) == 1 and float(counts[0]["2"]) == 512 + 4  # observation count: steps and the 4 first resets
    rewards = {k.rsplit(".", 1)[-1]: v for k, v in saved.items() if k.endswith(("mean", "var", "count"))}
    assert float(rewards["count"]) == pytest.approx(512 + 1e-4) and float(rewards["var"]) > 0
    # a fresh normalisation loaded from the checkpoint: its evaluation env reads the restored statistics
    env_cfg = EnvConfig(name="pendulum", num_envs=4)  # the preset's
    norm = Normalization(env_cfg, gamma=0.9)
    env = norm.training(make_env(env_cfg))
    env.load_state_dict(saved)
    assert float(norm.stats["observation_count"]) == 516 and float(env.transform[-1].count) == pytest.approx(512 + 1e-4)


@pytest.mark.parametrize("kind", ["multisync", "multiasync"])
def test_sac_runs_on_worker_processes(kind: str, tmp_path: Path) -> None:
    final = sac.train(
        _quick(sac, "pendulum", tmp_path, kind=kind, num_workers=2, total_frames=512, init_random_frames=256)
    )
    assert math.isfinite(final) and -16.3 * 200 <= final <= 0.0
    ckpt = torch.load(tmp_path / "quick" / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["collected_frames"] == 512  # exact over the workers
    assert json.loads((tmp_path / "quick" / "config.json").read_text())["collector"]["kind"] == kind


def test_ppo_runs_on_two_synchronous_workers(tmp_path: Path) -> None:
    final = ppo.train(_quick(ppo, "cartpole", tmp_path, kind="multisync", num_workers=2, total_frames=1024))
    assert math.isfinite(final) and 0 < final <= 500
    assert torch.load(tmp_path / "quick" / "checkpoint.pt", weights_only=True)["state"]["collected_frames"] == 1024


def test_make_collector_builds_the_configured_kind_and_splits_the_warm_up(tmp_path: Path) -> None:
    from recipes import common
    from rl_collect import Collector, MultiAsyncCollector, MultiSyncCollector
    from recipes.envs import make_env

    def collector(**fields):
        cfg = TrainConfig(
            algo=sac.Config(),
            env=EnvConfig(name="pendulum", num_envs=2),
            collector=CollectorConfig(frames_per_batch=8, total_frames=32, init_random_frames=10, **fields),
        )
        run = common.Run(cfg, tmp_path, None, 0.0, "sac")
        return common.make_collector(run, lambda: make_env(cfg.env), None, warmup=True)

    sync = collector()
    assert type(sync) is Collector and sync.init_random_frames == 10
    for kind, cls in (("multisync", MultiSyncCollector), ("multiasync", MultiAsyncCollector)):
        multi = collector(kind=kind, num_workers=2)  # 2 workers x 2 sub-envs: batches of 8 frames are 2 steps
        try:
            assert type(multi) is cls and multi.num_workers == 2
            assert sum(batch.numel() for batch in multi) == 32
        finally:
            multi.shutdown()
    with pytest.raises(ValueError, match="collector.kind must be one of .* got 'ray'"):
        collector(kind="ray")
    with pytest.raises(ValueError, match="collector.num_workers must be a positive int, got 0"):
        collector(kind="multisync", num_workers=0)


def _train_app(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "train.py"), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


QUICK = [
    "collector.total_frames=256",
    "collector.init_random_frames=128",
    "logger.eval_every=256",
    "env.eval_envs=2",
    "logger.progress=false",
    "logger=csv",
]


def test_train_app_multirun_over_seeds_writes_one_folder_per_seed(tmp_path: Path) -> None:
    proc = _train_app(
        [
            "-m",
            "algo=sac",
            "env=pendulum",
            "seed=0,1",
            f"runs_dir={tmp_path}",
            "name=sac_s${seed}",
            "algo.hidden=32",
            *QUICK,
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("final eval return") == 2
    for seed in (0, 1):
        run = tmp_path / f"sac_s{seed}"
        config = json.loads((run / "config.json").read_text())
        assert config["seed"] == seed and config["algo"]["hidden"] == 32 and config["logger"]["backends"] == ["csv"]
        assert (run / ".hydra" / "overrides.yaml").is_file()
    # the same name again is refused (a finished run is not overwritten) unless resume=true
    again = _train_app(["algo=sac", "env=pendulum", f"runs_dir={tmp_path}", "name=sac_s0", *QUICK], tmp_path)
    assert again.returncode != 0 and "pass resume=true" in again.stderr


def test_train_app_names_unknown_groups_and_tasks(tmp_path: Path) -> None:
    proc = _train_app(["algo=nope"], tmp_path)
    assert proc.returncode != 0 and "algo" in proc.stderr and "sac" in proc.stderr  # Hydra lists the options
    proc = _train_app(["algo=sac", "env.name=mars", *QUICK], tmp_path)
    assert proc.returncode != 0 and "env='mars' is not a known task" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe, env",
    [(sac, "pendulum"), (ppo, "cartpole"), (ppo, "pendulum"), (sac, "satellite")],
    ids=["sac-pendulum", "ppo-cartpole", "ppo-pendulum", "sac-satellite-macros"],
)
def test_preset_reaches_its_threshold(recipe, env: str, tmp_path: Path) -> None:
    cfg = TrainConfig(
        algo=recipe.Config(),
        env=EnvConfig(name=env),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset",
    )
    assert recipe.train(cfg) >= recipe.THRESHOLDS[env]


@pytest.mark.slow
@pytest.mark.mujoco
@pytest.mark.parametrize("recipe", [sac, td3, ppo], ids=["sac", "td3", "ppo"])
def test_halfcheetah_preset_reaches_its_threshold(recipe, tmp_path: Path) -> None:
    """HalfCheetah-v5 (Gymnasium's MuJoCo task): long on a CPU (one thread, seed 0: SAC 33 min, final 5,597; TD3 24 min,
    final 5,665; PPO 34 min, final 5,493)."""
    pytest.importorskip("mujoco")
    cfg = TrainConfig(
        algo=recipe.Config(),
        env=EnvConfig(name="halfcheetah"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset",
    )
    assert recipe.train(cfg) >= recipe.THRESHOLDS["halfcheetah"]
