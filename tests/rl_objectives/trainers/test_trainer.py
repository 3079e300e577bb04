"""Trainer: stage order, frame counting and the total_frames stop, optimizer steps, gradient clipping,
logging, a DQN run through a replay buffer, checkpoints (atomic writes, weights_only loads, rollback)
and argument errors — each against a reference written here."""

import argparse
import os
import sys

import pytest
import torch
from rl_objectives import DQNLoss, HardUpdate
from rl_objectives.modules import QValueActor
from rl_objectives.trainers import (
    HOOK_STAGES,
    CountFramesLog,
    OptimizerHook,
    ReplayBufferTrainer,
    TargetNetUpdaterHook,
    Trainer,
    UpdateWeights,
)
from tdict import TensorDict
from tdict.specs import OneHot
from torch import nn


class Regression(nn.Module):
    """loss_mse = mean((w . x + b - y)^2), plus a detached diagnostic."""

    def __init__(self, n_in=3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(n_in, 1)
        self.calls = 0

    def forward(self, td):
        self.calls += 1
        err = self.lin(td["x"]).squeeze(-1) - td["y"]
        return TensorDict(loss_mse=err.pow(2).mean(), abs_err=err.abs().mean().detach(), per_item=err.detach())


class Collector:
    """An iterable of [n_envs, T] batches with the optional collector methods, recording their calls."""

    def __init__(self, n_batches=None, n_envs=2, steps=4, init_random_frames=0, seed=0):
        self.n_batches, self.n_envs, self.steps = n_batches, n_envs, steps
        self.init_random_frames = init_random_frames
        self.yielded = 0
        self.shutdowns = 0
        self.weight_updates = 0
        self.seeds = []
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        while self.n_batches is None or self.yielded < self.n_batches:
            x = torch.randn(self.n_envs, self.steps, 3, generator=self.gen)
            y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
            self.yielded += 1
            yield TensorDict(
                {"x": x, "y": y, "next": {"reward": y.clone()}},
                batch_size=[self.n_envs, self.steps],
                names=[None, "time"],
            )

    def shutdown(self):
        self.shutdowns += 1

    def update_policy_weights_(self):
        self.weight_updates += 1

    def set_seed(self, seed):
        self.seeds.append(seed)
        return seed + 1

    def state_dict(self):
        return {"yielded": self.yielded}

    def load_state_dict(self, state):
        self.yielded = state["yielded"]


def make_trainer(collector=None, total_frames=48, steps=2, lr=0.05, init_seed=0, **kwargs):
    loss = Regression(seed=init_seed)
    opt = torch.optim.Adam(loss.parameters(), lr=lr)
    collector = collector if collector is not None else Collector()
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        optim_steps_per_batch=steps,
        loss_module=loss,
        optimizer=opt,
        **kwargs,
    )
    return trainer, loss, opt, collector


class RecordingLogger:
    def __init__(self):
        self.calls = []

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, value, step))


# ---------------------------------------------------------------------------- the loop
def test_stage_order_matches_reference():
    events = []
    trainer, loss, _, collector = make_trainer(Collector(n_batches=10), total_frames=24, steps=2)
    original_forward = loss.forward

    def forward(td):
        events.append("loss")
        return original_forward(td)

    loss.forward = forward
    for stage in HOOK_STAGES:
        if stage == "optimizer":
            trainer.register_op(stage, lambda losses, clip, norm, index, s=stage: events.append((s, index)))
        elif stage in ("pre_optim_steps", "post_optim", "post_steps"):
            trainer.register_op(stage, lambda s=stage: events.append(s))
        else:
            trainer.register_op(stage, lambda td, s=stage: events.append(s))
    trainer.train()

    expected = []
    for _ in range(3):  # 3 batches of 8 frames reach total_frames=24
        expected += ["batch_process", "pre_steps_log", "pre_optim_steps"]
        for _ in range(2):
            # the trainer's own OptimizerHook is optimizer op 0, ours is op 1
            expected += ["process_optim_batch", "loss", "post_loss", ("optimizer", 1), "post_optim", "post_optim_log"]
        expected += ["post_steps", "post_steps_log"]
    assert events == expected
    assert collector.yielded == 3 and collector.shutdowns == 1


@pytest.mark.parametrize("frame_skip", [1, 3])
def test_frames_counting_and_total_frames_stop(frame_skip):
    collector = Collector(n_envs=3, steps=5)  # endless, 15 steps per batch
    trainer, loss, _, _ = make_trainer(collector, total_frames=100, steps=3, frame_skip=frame_skip)
    trainer.train()
    per_batch = 15 * frame_skip
    n_batches = -(-100 // per_batch)  # the first batch count reaching 100 frames
    assert collector.yielded == n_batches
    assert trainer.collected_frames == n_batches * per_batch
    assert trainer._optim_count == 3 * n_batches == loss.calls
    assert collector.shutdowns == 1


def test_optimizer_steps_count_and_processed_batch():
    steps_taken = []

    class CountingSGD(torch.optim.SGD):
        def step(self, closure=None):
            steps_taken.append(1)
            return super().step(closure)

    loss = Regression()
    trainer = Trainer(
        collector=Collector(n_batches=4),
        total_frames=10_000,
        optim_steps_per_batch=5,
        loss_module=loss,
        optimizer=CountingSGD(loss.parameters(), lr=0.01),
    )
    seen = []
    trainer.register_op("batch_process", lambda td: td.select("x", "y"))
    trainer.register_op("process_optim_batch", lambda td: td[:, :2])  # the loss sees the processed sample
    trainer.register_op("post_loss", lambda td: seen.append((tuple(sorted(td.keys())), tuple(td.batch_size))))
    trainer.train()  # the collector runs out before total_frames
    assert len(steps_taken) == 20 == trainer._optim_count
    assert trainer.collected_frames == 32
    assert set(seen) == {(("x", "y"), (2, 2))}


def test_init_random_frames_skips_optimisation():
    collector = Collector(n_batches=4, init_random_frames=10)
    trainer, loss, _, _ = make_trainer(collector, total_frames=100, steps=2)
    trainer.train()
    # frames after each batch: 8, 16, 24, 32; optimisation only once frames > 10
    assert loss.calls == 2 * 3


class StepRecorder:
    """Records the trainer's collected_frames at every optimizer step and every replay-style sample."""

    def __init__(self, trainer, optimizer):
        self.steps, self.samples = [], []
        step = optimizer.step

        def recorded_step(*args, **kwargs):
            self.steps.append(trainer.collected_frames)
            return step(*args, **kwargs)

        optimizer.step = recorded_step
        trainer.register_op("process_optim_batch", lambda batch: self.samples.append(trainer.collected_frames))


def test_no_optimizer_step_before_the_trainers_init_random_frames():
    # a plain iterable (or a multi-process collector) has no init_random_frames attribute: the trainer's own
    collector = [b for _, b in zip(range(6), Collector())]
    trainer, _, opt, _ = make_trainer(collector, total_frames=48, steps=2, init_random_frames=20)
    recorder = StepRecorder(trainer, opt)
    trainer.train()
    # frames after each batch: 8, 16, 24, 32, 40, 48; warm-up while frames <= 20
    assert recorder.steps == [24, 24, 32, 32, 40, 40, 48, 48] == recorder.samples
    assert trainer.warmup_frames == 20 and trainer._optim_count == 8


def test_the_collectors_warm_up_counts_collector_steps_times_frame_skip():
    trainer, _, opt, _ = make_trainer(
        Collector(n_batches=4, init_random_frames=10), total_frames=100, steps=1, frame_skip=2
    )
    recorder = StepRecorder(trainer, opt)
    trainer.train()
    # 8 collector steps per batch = 16 frames; the collector's 10 random steps are 20 frames
    assert trainer.warmup_frames == 20
    assert recorder.steps == [32, 48, 64]
    # an explicit value wins over the collector's
    trainer, _, opt, _ = make_trainer(
        Collector(n_batches=4, init_random_frames=10), total_frames=100, steps=1, init_random_frames=0
    )
    recorder = StepRecorder(trainer, opt)
    trainer.train()
    assert recorder.steps == [8, 16, 24, 32]


def test_no_optimizer_step_during_a_real_collectors_random_warm_up():
    from rl_collect import Collector as RealCollector
    from rl_envs import PendulumEnv
    from tdict.nn import TensorDictModule

    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    collector = RealCollector(
        lambda: PendulumEnv(batch_size=[4]), policy, frames_per_batch=16, total_frames=96, init_random_frames=40
    )

    class ActionLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy

        def forward(self, td):
            return TensorDict(loss=self.policy(td.select("observation").clone())["action"].pow(2).mean())

    loss = ActionLoss()
    opt = torch.optim.SGD(loss.parameters(), lr=0.01)
    trainer = Trainer(collector=collector, total_frames=96, optim_steps_per_batch=1, loss_module=loss, optimizer=opt)
    recorder = StepRecorder(trainer, opt)
    trainer.train()
    # the collector acts randomly for its first 3 batches (it starts batch 3 at 32 < 40 frames); the
    # trainer's first step follows the batch that ends past 40 frames
    assert trainer.warmup_frames == 40
    assert recorder.steps == [48, 64, 80, 96]


def test_training_reduces_the_loss():
    trainer, loss, _, _ = make_trainer(Collector(), total_frames=8 * 60, steps=4, lr=0.05)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    before = loss(TensorDict(x=x, y=y, batch_size=[64]))["loss_mse"].item()
    trainer.train()
    after = loss(TensorDict(x=x, y=y, batch_size=[64]))["loss_mse"].item()
    assert after < 0.05 * before


# ---------------------------------------------------------------------------- clipping
class LinearLoss(nn.Module):
    """loss = g . w: the gradient is exactly g."""

    def __init__(self, g):
        super().__init__()
        self.w = nn.Parameter(torch.zeros_like(g))
        self.g = g

    def forward(self, td):
        return TensorDict(loss=(self.w * self.g).sum())


@pytest.mark.parametrize(
    "clip_grad_norm, clip_norm, expected_step",
    [
        (True, 1.0, torch.tensor([3.0, -4.0, 0.0]) / 5.0),  # norm 5 scaled to 1
        (False, 1.0, torch.tensor([1.0, -1.0, 0.0])),  # each value clamped to [-1, 1]
        (True, None, torch.tensor([3.0, -4.0, 0.0])),  # no clipping
        (True, 10.0, torch.tensor([3.0, -4.0, 0.0])),  # under the threshold
    ],
)
def test_grad_clipping_effect(clip_grad_norm, clip_norm, expected_step):
    g = torch.tensor([3.0, -4.0, 0.0])
    loss = LinearLoss(g)
    grad_norms = []
    trainer = Trainer(
        collector=[TensorDict(batch_size=[1, 1])],
        total_frames=1,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=1.0),
        clip_grad_norm=clip_grad_norm,
        clip_norm=clip_norm,
    )
    trainer.register_op("optimizer", lambda losses, *args: grad_norms.append(float(losses["grad_norm_0"])))
    trainer.train()
    torch.testing.assert_close(-loss.w.detach(), expected_step, rtol=1e-5, atol=1e-5)
    assert grad_norms == [pytest.approx(5.0)]  # the norm before clipping
    assert loss.w.grad is None  # zeroed after the step


# ---------------------------------------------------------------------------- logging
def test_logging_interval_and_averaged_losses():
    logger = RecordingLogger()
    values = iter([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 5.0, 5.0, 5.0, 7.0, 8.0, 9.0])

    class ScriptedLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def forward(self, td):
            return TensorDict(loss_a=self.w * 0 + next(values), extra=torch.zeros(5))

    loss = ScriptedLoss()
    trainer = Trainer(
        collector=Collector(n_batches=4),
        total_frames=10_000,
        optim_steps_per_batch=3,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        logger=logger,
        log_interval=20,
    )
    trainer.register_op("pre_steps_log", lambda td: {"frames_seen": td.numel(), "log_pbar": True})
    trainer.train()
    # reference: a name is logged the first time, then once >= 20 frames passed since its last log
    frames, last, expected = 0, {}, []
    averages = [2.0, 20.0, 5.0, 8.0]
    for b in range(4):
        frames += 8
        for name, value in (
            ("frames_seen", 8),
            ("loss_a", averages[b]),
            ("grad_norm_0", 0.0),
            ("optim_steps", 3 * (b + 1)),
        ):
            if name not in last or frames - last[name] >= 20:
                last[name] = frames
                expected.append((name, value, frames))
    got = sorted(logger.calls, key=lambda c: (c[2], c[0]))
    expected = sorted(expected, key=lambda c: (c[2], c[0]))
    assert [(name, step) for name, _, step in got] == [(name, step) for name, _, step in expected]
    assert [value for _, value, _ in got] == pytest.approx([value for _, value, _ in expected])
    assert "extra" not in trainer.last_logged  # non-scalar diagnostics are not logged
    assert trainer.last_logged["loss_a"] == pytest.approx(8.0)


def test_a_loss_some_steps_skip_is_averaged_over_its_own_steps():
    # TD3's delayed actor: loss_actor appears on every second step only
    class Delayed(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))
            self.step = 0

        def forward(self, td):
            self.step += 1
            out = TensorDict(loss_critic=self.w * 0 + float(self.step))
            if self.step % 2 == 0:
                out.set("loss_actor", self.w * 0 + 10.0 * self.step)
            return out

    loss = Delayed()
    trainer = Trainer(
        collector=Collector(n_batches=1),
        total_frames=8,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        logger=RecordingLogger(),
    )
    trainer.train()
    assert trainer.last_logged["loss_critic"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert trainer.last_logged["loss_actor"] == pytest.approx((20 + 40) / 2)  # not (20 + 40) / 4


def test_progress_bar_without_tqdm_warns_and_trains(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as when tqdm is not installed
    with pytest.warns(UserWarning, match="'tqdm'"):
        trainer, *_ = make_trainer(Collector(n_batches=2), total_frames=16, progress_bar=True)
    trainer.train()
    assert trainer.progress_bar is False and trainer.collected_frames == 16


def test_log_hook_must_return_a_dict():
    trainer, *_ = make_trainer(Collector(n_batches=1))
    trainer.register_op("post_steps_log", lambda td: 3.0)
    with pytest.raises(TypeError, match="post_steps_log"):
        trainer.train()


def test_seed_goes_to_collector_and_torch():
    collector = Collector(n_batches=1)
    make_trainer(collector)  # no seed given: set_seed is not called
    assert collector.seeds == []
    make_trainer(collector, seed=7)
    a = torch.rand(3)
    torch.manual_seed(8)  # the collector returned 7 + 1
    assert collector.seeds == [7] and torch.equal(a, torch.rand(3))


# ---------------------------------------------------------------------------- DQN through a replay buffer
class ListBuffer:
    """A duck-typed uniform buffer over single steps, with priority updates recorded."""

    def __init__(self, seed=0):
        self.data = None
        self.priority_updates = []
        self.gen = torch.Generator().manual_seed(seed)

    def extend(self, td):
        assert td.ndim == 1
        self.data = td.clone() if self.data is None else torch.cat([self.data, td], 0)

    def sample(self, batch_size):
        index = torch.randint(self.data.batch_size[0], (batch_size,), generator=self.gen)
        out = self.data[index]
        out.set("index", index)
        return out

    def update_priority(self, index, priority):
        self.priority_updates.append((index.clone(), priority.clone()))


def dqn_batches(n_batches, n_envs=2, steps=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        obs = torch.randn(n_envs, steps, 4, generator=gen)
        action = nn.functional.one_hot(torch.randint(2, (n_envs, steps), generator=gen), 2)
        yield TensorDict(
            {
                "observation": obs,
                "action": action,
                "next": {
                    "observation": torch.randn(n_envs, steps, 4, generator=gen),
                    "reward": obs[..., 0] * (action[..., 0] * 2 - 1),
                    "done": torch.zeros(n_envs, steps, dtype=torch.bool),
                    "terminated": torch.zeros(n_envs, steps, dtype=torch.bool),
                },
            },
            batch_size=[n_envs, steps],
        )


def test_dqn_with_replay_buffer_priorities_and_target_updates():
    torch.manual_seed(0)
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), spec=OneHot(2)))
    loss.make_value_estimator(gamma=0.5)
    buffer = ListBuffer()
    trainer = Trainer(
        collector=list(dqn_batches(6)),
        total_frames=60,
        optim_steps_per_batch=3,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
    )
    ReplayBufferTrainer(buffer, batch_size=8).register(trainer)
    updater = HardUpdate(loss, value_network_update_interval=4)
    TargetNetUpdaterHook(updater).register(trainer)
    samples = []
    trainer.register_op("post_loss", lambda td: samples.append(td))
    trainer.train()

    assert buffer.data.batch_size == torch.Size([60])  # every step of every batch, flattened
    assert len(buffer.priority_updates) == 18 == updater.counter
    for (index, priority), sample in zip(buffer.priority_updates, samples):
        assert torch.equal(index, sample["index"])
        assert torch.equal(priority, sample["td_error"])  # what DQN wrote for this sample
    # the hard update copied the online parameters at optimizer step 16; two steps changed them since
    target = loss.params_of("value_network", target=True)["module", "0", "module", "weight"]
    online = loss.params_of("value_network")["module", "0", "module", "weight"]
    assert not torch.equal(target, online)


def test_no_optimizer_raises_before_training():
    loss = Regression()
    collector = Collector(n_batches=1)
    trainer = Trainer(collector=collector, total_frames=8, optim_steps_per_batch=1, loss_module=loss)
    with pytest.raises(RuntimeError, match="optimizer"):
        trainer.train()
    assert collector.yielded == 0
    OptimizerHook(torch.optim.SGD(loss.parameters(), lr=0.1)).register(trainer)
    trainer.train()
    assert trainer._optim_count == 1


# ---------------------------------------------------------------------------- checkpoints
def _register_stateful(trainer, collector):
    CountFramesLog().register(trainer)
    UpdateWeights(collector, update_weights_interval=2).register(trainer)


def test_state_save_load_round_trip_and_resume(tmp_path):
    path = tmp_path / "ckpt" / "trainer.pt"
    trainer, loss, opt, collector = make_trainer(
        Collector(seed=1), total_frames=40, steps=2, save_trainer_file=path, save_trainer_interval=16
    )
    _register_stateful(trainer, collector)
    trainer.train()
    assert path.exists() and not [p for p in path.parent.iterdir() if p.name != "trainer.pt"]  # no temp file left

    fresh, loss2, opt2, collector2 = make_trainer(Collector(seed=1), total_frames=80, steps=2, init_seed=1)
    _register_stateful(fresh, collector2)
    assert not torch.equal(loss2.lin.weight, loss.lin.weight)
    fresh.load_from_file(path)
    torch.testing.assert_close(loss2.lin.weight, loss.lin.weight, rtol=0, atol=0)
    state, state2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    for k in state:
        torch.testing.assert_close(state2[k]["exp_avg"], state[k]["exp_avg"], rtol=0, atol=0)
        assert float(state2[k]["step"]) == float(state[k]["step"]) == 10
    assert fresh.collected_frames == 40 and fresh._optim_count == 10
    assert collector2.yielded == 5
    assert fresh._modules["count_frames_log"].frame_count == 40
    assert fresh._modules["update_weights"].counter == 5

    fresh.train()  # resumes: 40 more frames, the collector's counter continues
    assert fresh.collected_frames == 80 and fresh._optim_count == 20
    assert fresh._modules["count_frames_log"].frame_count == 80 and collector2.yielded == 10


def test_periodic_saves_follow_the_interval(tmp_path, monkeypatch):
    import rl_objectives.trainers.trainer as trainer_module

    saved_at = []
    original = trainer_module.atomic_torch_save
    monkeypatch.setattr(
        trainer_module,
        "atomic_torch_save",
        lambda obj, p: (saved_at.append(obj["state"]["collected_frames"]), original(obj, p)),
    )
    trainer, *_ = make_trainer(
        Collector(), total_frames=80, steps=1, save_trainer_file=tmp_path / "t.pt", save_trainer_interval=20
    )
    trainer.train()
    # batches of 8 frames: due once 20 frames passed since the last save, plus the final save
    assert saved_at == [24, 48, 72, 80]


@pytest.mark.parametrize("failure", ["torch_save", "os_replace"])
def test_checkpoint_write_is_atomic(tmp_path, monkeypatch, failure):
    path = tmp_path / "trainer.pt"
    trainer, loss, *_ = make_trainer(Collector(n_batches=2), total_frames=16, save_trainer_file=path)
    trainer.train()
    good = path.read_bytes()
    weight = loss.lin.weight.detach().clone()

    with torch.no_grad():
        loss.lin.weight.add_(1.0)
    trainer.collected_frames = 999
    if failure == "torch_save":

        def broken_save(obj, f, *args, **kwargs):
            f.write(b"half a checkpoint")  # the process "dies" mid-write
            raise OSError("disk full")

        monkeypatch.setattr(torch, "save", broken_save)
    else:

        def broken_replace(src, dst):
            raise OSError("killed before the rename")

        monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        trainer.save_trainer(force_save=True)
    monkeypatch.undo()

    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainer.pt"]  # the temp file is gone
    assert trainer._last_save == 16  # a failed save does not count as one
    loaded = torch.load(path, weights_only=True)
    assert loaded["state"]["collected_frames"] == 16
    torch.testing.assert_close(loaded["loss_module"]["lin.weight"], weight)


@pytest.mark.parametrize("keep", ["empty", "half", "all_but_the_last_byte"])
def test_a_truncated_checkpoint_names_the_file(tmp_path, keep):
    path = tmp_path / "trainer.pt"
    trainer, loss, *_ = make_trainer(Collector(n_batches=2), total_frames=16, save_trainer_file=path)
    trainer.train()
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes({"empty": b"", "half": data[: len(data) // 2], "all_but_the_last_byte": data[:-1]}[keep])
    fresh, loss2, *_ = make_trainer(Collector(n_batches=2), total_frames=16, init_seed=3)
    before = loss2.lin.weight.detach().clone()
    with pytest.raises(
        RuntimeError, match=r"load_from_file: '.*cut\.pt' \(\d+ bytes\) is truncated or corrupt"
    ) as info:
        fresh.load_from_file(cut)
    assert isinstance(info.value.__cause__, (EOFError, RuntimeError, OSError))  # torch's own error, kept
    assert torch.equal(loss2.lin.weight, before) and fresh.collected_frames == 0  # nothing loaded
    fresh.load_from_file(path)  # the complete file still loads
    assert fresh.collected_frames == 16


def test_load_never_unpickles(tmp_path):
    path = tmp_path / "evil.pt"

    torch.save({"state": argparse.Namespace(x=1)}, path)  # an arbitrary (picklable) object
    trainer, *_ = make_trainer(Collector(n_batches=1))
    with pytest.raises(Exception, match="(?i)weights_only|unsupported|global"):
        trainer.load_from_file(path)


def test_load_state_dict_checks_keys_and_rolls_back():
    trainer, loss, _, _ = make_trainer(Collector(n_batches=2), total_frames=16)
    CountFramesLog().register(trainer)
    trainer.train()
    good = trainer.state_dict()

    other, loss2, _, collector2 = make_trainer(Collector(n_batches=2), total_frames=16, init_seed=3)
    CountFramesLog().register(other)
    before = loss2.lin.weight.detach().clone()
    with pytest.raises(KeyError, match="missing \\['count_frames_log'\\]"):
        other.load_state_dict({k: v for k, v in good.items() if k != "count_frames_log"})
    with pytest.raises(KeyError, match="unexpected \\['replay_buffer'\\]"):
        other.load_state_dict({**good, "replay_buffer": {}})
    # a failure inside a later component: everything loaded before it is put back
    broken = dict(good, count_frames_log={"frame_count": "many"})
    with pytest.raises(TypeError, match="frame_count"):
        other.load_state_dict(broken)
    assert torch.equal(loss2.lin.weight, before)
    assert other.collected_frames == 0 and collector2.yielded == 0
    assert other._modules["count_frames_log"].frame_count == 0
    other.load_state_dict(good)
    assert torch.equal(loss2.lin.weight, loss.lin.weight) and other.collected_frames == 16


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"total_frames": 0}, ValueError, "total_frames"),
        ({"frame_skip": 0}, ValueError, "frame_skip"),
        ({"optim_steps_per_batch": -1}, ValueError, "optim_steps_per_batch"),
        ({"init_random_frames": -1}, ValueError, "init_random_frames"),
        ({"clip_norm": -1.0}, ValueError, "clip_norm"),
        ({"save_trainer_interval": 0}, ValueError, "save_trainer_interval"),
        ({"log_interval": 1.5}, ValueError, "log_interval"),
        ({"collector": 3}, TypeError, "collector"),
        ({"loss_module": "loss"}, TypeError, "loss_module"),
        ({"optimizer": object()}, TypeError, "optimizer"),
        ({"logger": object()}, TypeError, "logger"),
        ({"seed": "7"}, ValueError, "seed"),
        ({"save_trainer_file": 3}, TypeError, "save_trainer_file"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs, exc, match):
    loss = Regression()
    args = {
        "collector": [],
        "total_frames": 8,
        "optim_steps_per_batch": 1,
        "loss_module": loss,
        "optimizer": torch.optim.SGD(loss.parameters(), lr=0.1),
    }
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        Trainer(**args)


def test_registration_errors():
    trainer, *_ = make_trainer(Collector(n_batches=1))
    with pytest.raises(ValueError, match="dest='post_everything'.*batch_process"):
        trainer.register_op("post_everything", lambda: None)
    with pytest.raises(TypeError, match="callable"):
        trainer.register_op("post_steps", 3)
    with pytest.raises(ValueError, match="'optimizer' is already registered"):
        trainer.register_module("optimizer", CountFramesLog())
    with pytest.raises(ValueError, match="'state'"):
        trainer.register_module("state", CountFramesLog())
    with pytest.raises(TypeError, match="state_dict"):
        trainer.register_module("thing", object())


def test_bad_batches_and_loss_outputs():
    trainer, *_ = make_trainer([{"x": 1}])
    with pytest.raises(TypeError, match="collector yielded a dict"):
        trainer.train()
    trainer = Trainer(
        collector=Collector(n_batches=1),
        total_frames=8,
        optim_steps_per_batch=1,
        loss_module=lambda td: {"loss": 1},
        optimizer=torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1),
    )
    with pytest.raises(TypeError, match="loss_module must return a TensorDict"):
        trainer.train()


# ---------------------------------------------------------------------------- exact resume: RNGs and folders
def test_seed_seeds_python_and_numpy_too():
    import random

    import numpy as np

    make_trainer(Collector(n_batches=1), seed=7)  # the collector returns 8
    a = (random.random(), float(np.random.rand()))
    random.seed(8)
    np.random.seed(8)
    assert a == (random.random(), float(np.random.rand()))


def test_the_checkpoint_restores_every_global_generator(tmp_path):
    import random

    import numpy as np

    path = tmp_path / "trainer.pt"
    trainer, *_ = make_trainer(Collector(n_batches=2), total_frames=16, save_trainer_file=path, seed=3)
    trainer.train()
    expected = (torch.rand(3), random.random(), float(np.random.rand()))
    torch.manual_seed(99), random.seed(99), np.random.seed(99)
    fresh, *_ = make_trainer(Collector(n_batches=2), total_frames=16)
    fresh.load_from_file(path)
    got = (torch.rand(3), random.random(), float(np.random.rand()))
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


class FolderBuffer:
    """A buffer saved whole into a folder (the rl_replay protocol: dumps/loads), recording its calls."""

    def __init__(self):
        self.items: list[float] = []
        self.loaded_from = None

    def extend(self, td):
        self.items.extend(td["x"].reshape(-1, 3)[:, 0].tolist())

    def sample(self, batch_size):
        n = batch_size or 4
        x = torch.tensor(self.items[-n:]).unsqueeze(-1).expand(-1, 3)
        return TensorDict(x=x, y=x.sum(-1), batch_size=[n])

    def state_dict(self):
        return {"n": len(self.items)}

    def load_state_dict(self, state):
        assert state["n"] == len(self.items)  # what loads() restored is kept

    def dumps(self, path):
        os.makedirs(path)
        with open(os.path.join(path, "items.txt"), "w") as f:
            f.write(",".join(map(repr, self.items)))

    def loads(self, path):
        with open(os.path.join(path, "items.txt")) as f:
            self.items = [float(v) for v in f.read().split(",")]
        self.loaded_from = os.path.basename(path)


def test_a_buffer_is_saved_whole_into_a_folder_named_by_the_checkpoint(tmp_path):
    path = tmp_path / "trainer.pt"
    trainer, *_ = make_trainer(
        Collector(n_batches=6), total_frames=48, save_trainer_file=path, save_trainer_interval=16
    )
    buffer = FolderBuffer()
    ReplayBufferTrainer(buffer, batch_size=4).register(trainer)
    trainer.train()
    folders = sorted(p.name for p in tmp_path.iterdir() if p.name != "trainer.pt")
    saved = torch.load(path, weights_only=True)["replay_buffer"]
    assert saved == {"__dumped_to__": folders[0]} and len(folders) == 1  # earlier checkpoints' folders are gone
    assert folders[0].startswith("trainer.pt.replay_buffer.")

    fresh, *_ = make_trainer(Collector(n_batches=6), total_frames=48)
    other = FolderBuffer()
    ReplayBufferTrainer(other, batch_size=4).register(fresh)
    fresh.load_from_file(path)
    assert other.items == buffer.items and len(other.items) == 48 and other.loaded_from == folders[0]


def test_a_checkpoint_naming_a_missing_folder_raises_naming_it(tmp_path):
    import shutil

    path = tmp_path / "trainer.pt"
    trainer, *_ = make_trainer(Collector(n_batches=2), total_frames=16, save_trainer_file=path)
    ReplayBufferTrainer(FolderBuffer(), batch_size=4).register(trainer)
    trainer.train()
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    shutil.rmtree(folder)
    fresh, loss, *_ = make_trainer(Collector(n_batches=2), total_frames=16, init_seed=5)
    ReplayBufferTrainer(FolderBuffer(), batch_size=4).register(fresh)
    before = loss.lin.weight.detach().clone()
    with pytest.raises(FileNotFoundError, match=rf"names {folder.name!r} for 'replay_buffer', which is missing"):
        fresh.load_from_file(path)
    assert torch.equal(loss.lin.weight, before) and fresh.collected_frames == 0


def test_a_failed_folder_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "trainer.pt"
    trainer, *_ = make_trainer(
        Collector(n_batches=4), total_frames=32, save_trainer_file=path, save_trainer_interval=16
    )
    buffer = FolderBuffer()
    ReplayBufferTrainer(buffer, batch_size=4).register(trainer)
    calls = []

    def failing_dumps(p):
        calls.append(p)
        if len(calls) == 2:
            os.makedirs(p)
            raise OSError("disk full")
        FolderBuffer.dumps(buffer, p)

    monkeypatch.setattr(buffer, "dumps", failing_dumps)
    with pytest.raises(OSError, match="disk full"):
        trainer.train()
    # the first checkpoint (16 frames) and its folder are intact; the failed folder was removed
    assert torch.load(path, weights_only=True)["state"]["collected_frames"] == 16
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [os.path.basename(calls[0])]


def test_files_written_atomically_get_the_usual_permissions(tmp_path):
    import stat

    from rl_objectives.trainers import atomic_torch_save

    old = os.umask(0o022)
    try:
        atomic_torch_save({"x": torch.ones(1)}, tmp_path / "a.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.pt").st_mode) == 0o644  # not mkstemp's 0600


def test_the_global_generator_helpers_are_tdict_seeding_s():
    from tdict import seeding

    from rl_objectives import trainers

    assert trainers.rng_state is seeding.rng_state and trainers.set_rng_state is seeding.set_rng_state
    assert trainers.seed_everything is seeding.seed_everything
