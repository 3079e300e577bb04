"""TargetNetUpdaterHook(unit="frames"): a HardUpdate copies each time N more frames were collected,
checked against hand-written reference loops (ours, frame by frame, and SB3's DQN rule)."""

import math

import pytest
import torch
from rl_objectives import HardUpdate, LossModule, SoftUpdate
from rl_objectives.trainers import TargetNetUpdaterHook, Trainer
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn


def batches(n_batches, n_envs, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        TensorDict(
            {
                "obs": torch.randn(n_envs, steps, 3, generator=gen),
                "next": {"reward": torch.randn(n_envs, steps, generator=gen)},
            },
            batch_size=[n_envs, steps],
        )
        for _ in range(n_batches)
    ]


class TinyLoss(LossModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convert_to_functional(
            TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["v"]), "net", create_target_params=True
        )

    def forward(self, td):
        out = self.call_network("net", td.copy())
        return TensorDict(loss=(out["v"].squeeze(-1) - td["next", "reward"]).pow(2).mean())


class RecordingHardUpdate(HardUpdate):
    """A HardUpdate that records the trainer's frame count at every copy."""

    def __init__(self, loss, interval):
        self.trainer, self.copies = None, []
        super().__init__(loss, value_network_update_interval=interval)

    def _copy(self):  # every copy into the targets: at construction and each one step() makes
        if self.trainer is not None:
            self.copies.append(self.trainer.collected_frames)
        super()._copy()


def run(n_envs, steps, n_batches, interval, frame_skip=1, optim_steps=2, unit="frames", total=None):
    """Trains with the hook; returns (copy frames, online weights at each batch start, trainer, loss)."""
    loss = TinyLoss()
    frames = n_envs * steps * frame_skip
    trainer = Trainer(
        collector=batches(n_batches, n_envs, steps),
        total_frames=total or n_batches * frames,
        frame_skip=frame_skip,
        optim_steps_per_batch=optim_steps,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.05),
    )
    starts = {}  # registered before the hook: the online weights each batch starts from
    trainer.register_op(
        "batch_process", lambda b: starts.__setitem__(trainer.collected_frames, loss.params_of("net").clone())
    )
    updater = RecordingHardUpdate(loss, interval)
    updater.trainer = trainer
    TargetNetUpdaterHook(updater, unit=unit).register(trainer)
    trainer.train()
    return updater, starts, trainer, loss


def reference_copy_frames(batch_frames, interval):
    """Our rule, frame by frame: a copy is due when a frame lands on a multiple of the interval; it is
    made when the batch holding that frame is processed (before training on it)."""
    frames, copies = 0, []
    for n in batch_frames:
        due = False
        for _ in range(n):
            frames += 1
            due |= frames % interval == 0
        if due:
            copies.append(frames)
    return copies


def sb3_copy_frames(n_envs, train_freq, n_rollouts, target_update_interval):
    """SB3's DQN: ``_on_step`` after every vector step copies when ``n_calls % max(interval // n_envs, 1) == 0``;
    returns the env steps (``num_timesteps``) at the copies."""
    n_calls, num_timesteps, copies = 0, 0, []
    for _ in range(n_rollouts):
        for _ in range(train_freq):  # collect_rollouts: train_freq vector steps, no training in between
            num_timesteps += n_envs
            n_calls += 1
            if n_calls % max(target_update_interval // n_envs, 1) == 0:
                copies.append(num_timesteps)
        # ... then train(gradient_steps)
    return copies


@pytest.mark.parametrize(
    "n_envs, steps, interval, frame_skip",
    [
        (1, 4, 10, 1),  # SB3's default shape: one env, train_freq 4
        (4, 4, 32, 1),  # an interval of two batches
        (4, 1, 8, 1),  # one vector step per batch
        (2, 8, 4, 1),  # several multiples inside one batch: one copy
        (3, 5, 7, 1),  # n_envs does not divide the interval
        (2, 3, 9, 2),  # frame_skip counts
        (5, 4, 1000, 1),  # never reached
    ],
)
def test_hard_update_copies_every_interval_of_frames(n_envs, steps, interval, frame_skip):
    n_batches = 12
    updater, starts, trainer, loss = run(n_envs, steps, n_batches, interval, frame_skip)
    batch_frames = [n_envs * steps * frame_skip] * n_batches
    expected = reference_copy_frames(batch_frames, interval)
    assert updater.copies == expected
    assert updater.counter == trainer.collected_frames == sum(batch_frames)
    # the copy holds the online weights the batch started from (before its optimisation steps)
    target = loss.params_of("net", target=True)
    if expected:
        assert (target == starts[expected[-1]]).all()
        assert not (target == loss.params_of("net")).all()  # training moved on since
    else:
        assert (target == starts[batch_frames[0]]).all()  # only the initial copy: the untrained weights
        assert not (target == loss.params_of("net")).all()


@pytest.mark.parametrize("n_envs, train_freq, interval", [(1, 4, 10), (4, 4, 32), (4, 1, 8), (2, 8, 4), (8, 2, 40)])
def test_same_copies_as_sb3_when_n_envs_divides_the_interval(n_envs, train_freq, interval):
    """A batch is one SB3 rollout (frames_per_batch = train_freq * n_envs): SB3 copies during the
    rollout with the weights of its last training, we at the rollout's end before training on it."""
    assert interval % n_envs == 0
    n_rollouts = 15
    updater, *_ = run(n_envs, train_freq, n_rollouts, interval)
    batch = train_freq * n_envs
    sb3 = sb3_copy_frames(n_envs, train_freq, n_rollouts, interval)
    assert sb3  # the case does copy
    assert updater.copies == sorted({math.ceil(f / batch) * batch for f in sb3})


@pytest.mark.parametrize("n_envs, train_freq, interval", [(3, 1, 7), (4, 2, 10), (5, 1, 12)])
def test_sb3s_interval_when_n_envs_does_not_divide_it(n_envs, train_freq, interval):
    """SB3 copies every max(N // n_envs, 1) * n_envs frames: that interval reproduces it."""
    n_rollouts = 15
    updater, *_ = run(n_envs, train_freq, n_rollouts, max(interval // n_envs, 1) * n_envs)
    batch = train_freq * n_envs
    sb3 = sb3_copy_frames(n_envs, train_freq, n_rollouts, interval)
    assert updater.copies == sorted({math.ceil(f / batch) * batch for f in sb3})
    unrounded, *_ = run(n_envs, train_freq, n_rollouts, interval)
    assert unrounded.copies == reference_copy_frames([batch] * n_rollouts, interval) != updater.copies


def test_default_unit_counts_optimizer_steps():
    updater, _, trainer, _ = run(2, 3, 6, interval=4, optim_steps=3, unit="optim_steps")
    # optimizer steps 4, 8, 12, 16: during the batches ending at frames 12, 18, 24, 36 (3 steps per 6-frame batch)
    assert updater.counter == trainer._optim_count == 18
    assert updater.copies == [12, 18, 24, 36]
    assert trainer._ops["post_optim"] and not trainer._ops["batch_process"][1:]


def test_the_frame_counter_round_trips_and_resumes_on_schedule(tmp_path):
    path = tmp_path / "trainer.pt"
    n_envs, steps, interval = 2, 5, 25  # 10 frames a batch
    full, *_ = run(n_envs, steps, 10, interval)

    loss = TinyLoss()
    trainer = Trainer(
        collector=batches(10, n_envs, steps),
        total_frames=40,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.05),
        save_trainer_file=path,
    )
    TargetNetUpdaterHook(HardUpdate(loss, value_network_update_interval=interval), unit="frames").register(trainer)
    trainer.train()
    assert trainer.state_dict()["target_net_updater"] == {"counter": 40}

    loss2 = TinyLoss()
    resumed = Trainer(
        collector=batches(10, n_envs, steps)[4:],
        total_frames=100,
        optim_steps_per_batch=1,
        loss_module=loss2,
        optimizer=torch.optim.SGD(loss2.parameters(), lr=0.05),
    )
    updater = RecordingHardUpdate(loss2, interval)
    updater.trainer = resumed
    TargetNetUpdaterHook(updater, unit="frames").register(resumed)
    resumed.load_from_file(path)
    assert updater.counter == 40
    resumed.train()
    assert updater.copies == [c for c in full.copies if c > 40] == [50, 80, 100]


def test_soft_update_in_frames_is_one_polyak_step_per_frame():
    loss = TinyLoss()
    trainer = Trainer(
        collector=batches(3, 2, 4),
        total_frames=24,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
    )
    reference = loss.params_of("net", target=True).clone()

    def polyak(batch):  # registered first: the same 8 steps by hand, towards the weights the batch starts from
        online = loss.params_of("net")
        for _ in range(batch.numel()):
            reference.update(reference.apply(lambda t, s: 0.9 * t + 0.1 * s, online))

    trainer.register_op("batch_process", polyak)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=0.1), unit="frames").register(trainer)
    trainer.train()
    target = loss.params_of("net", target=True)
    for key in target.keys(True, True):
        torch.testing.assert_close(target[key], reference[key], atol=1e-6, rtol=1e-6)


def test_bad_arguments():
    loss = TinyLoss()
    with pytest.raises(ValueError, match=r"unit must be one of \['optim_steps', 'frames'\], got 'steps'"):
        TargetNetUpdaterHook(HardUpdate(loss), unit="steps")

    class NoCount:
        def step(self):
            pass

    with pytest.raises(
        TypeError, match=r"unit='frames' calls target_params_updater.step\(n\) .* NoCount.step\(\) takes no n"
    ):
        TargetNetUpdaterHook(NoCount(), unit="frames")
    TargetNetUpdaterHook(NoCount())  # counting optimizer steps needs no argument
    hook = TargetNetUpdaterHook(HardUpdate(loss, value_network_update_interval=3), unit="frames")
    with pytest.raises(TypeError, match="expected the collected TensorDict batch .* got NoneType"):
        hook()
    assert hook.state_dict() == {"counter": 0}


def test_frames_are_the_collected_batch_even_when_an_earlier_op_shortens_it():
    """An op registered before the hook may pass on a shorter batch (n-step transitions hold the last
    steps back for the next batch): the hook and AnnealExploration still count the collected frames
    (the trainer's batch_frames), as SB3 counts env steps."""
    from rl_objectives.modules import EGreedyModule
    from rl_objectives.trainers import AnnealExploration
    from tdict.specs import OneHot

    n_envs, steps, n_batches, interval = 2, 8, 3, 5
    loss = TinyLoss()
    trainer = Trainer(
        collector=batches(n_batches, n_envs, steps),
        total_frames=n_batches * n_envs * steps,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.05),
    )
    trainer.register_op("batch_process", lambda b: b[..., 3:])  # 3 of every env's steps held back
    updater = RecordingHardUpdate(loss, interval)
    updater.trainer = trainer
    TargetNetUpdaterHook(updater, unit="frames").register(trainer)
    egreedy = EGreedyModule(OneHot(2), eps_init=1.0, eps_end=0.0, annealing_num_steps=1_000)
    AnnealExploration(egreedy).register(trainer)
    trainer.train()
    assert trainer.batch_frames == n_envs * steps
    assert updater.counter == n_batches * n_envs * steps  # not n_batches * n_envs * (steps - 3)
    assert updater.copies == reference_copy_frames([n_envs * steps] * n_batches, interval)
    assert egreedy._anneal_count == n_batches * n_envs * steps
