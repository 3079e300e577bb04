"""Atari throughput: ``rl_envs.make_atari_env`` vs EnvPool vs ale-py's vector engine, Pong with the standard pipeline.

Usage::

    python benchmarks/bench_atari.py [--quick] [--out PATH] [--threads 1,2] [--samples N]

Same method as the other scripts (one process, interleaved rounds, paired medians; 1 torch thread).
Every implementation runs 8 Pong games with the DQN-Nature preprocessing (up to 30 no-op frames
after a reset, 4 frames per action max-pooled over the last two, grayscale, 84x84 ``INTER_AREA``
resize, 4 stacked frames, sticky actions 0.25 as ``ALE/Pong-v5``, no fire reset, no reward clipping,
episodes cut at 108000 frames), with the same number of C++ worker threads (``--threads``: each
value is one set of workloads). One call is 100 steps of the 8 games with random actions
(precomputed); episodes that end are reset (each implementation's own way).

- **ours**: ``make_atari_env("ALE/Pong-v5", num_envs=8, num_threads=t)`` (one-hot actions, the
  end-of-life transform), stepped with ``step_and_maybe_reset`` (``step loop``) or
  ``rollout(100, auto_reset=False)`` from the last step (``rollout``: it also stacks the 100 steps into
  one TensorDict, which the peer's loop does not).
- **peer**: ``envpool.make("Pong-v5", env_type="gymnasium", num_envs=8, num_threads=t, ...)`` with
  the same settings, ``env.step(actions)`` in a loop.
- **floor**: ale-py's ``AtariVectorEnv`` (the engine ours runs on) stepped in a plain loop: what
  ours costs over the engine.

Target: ours >= 0.8x EnvPool's steps/s (speed-up vs envpool >= 0.8) at every thread count.
"""

from __future__ import annotations

import argparse
import datetime as dt
import warnings
from pathlib import Path
from types import SimpleNamespace as NS

import torch

from _harness import (
    import_ours,
    Comparison,
    Impl,
    Workload,
    machine_info,
    render,
    run_all,
    run_config,
    summarize,
    write_report,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NUM_ENVS, STEPS, N_ACTIONS = 8, 100, 6
TARGET = 0.8
SETTINGS = {"frame_skip": 4, "noop_max": 30, "stack": 4, "size": 84, "sticky": 0.25, "max_frames": 108_000}


def _import_ours():
    return import_ours("rl_envs")[0]


def load() -> list[Impl]:
    rl_envs = _import_ours()
    impls = [Impl("ours", "rl_envs", "td", wrap=None, TensorDict=rl_envs, version=rl_envs.__version__)]
    try:
        import envpool

        impls.append(Impl("envpool", "envpool", "plain", wrap=None, TensorDict=envpool, version=envpool.__version__))
    except ImportError as e:
        print(f"note: skipping envpool ({e})")
    impls.append(Impl("plain", "ale-py engine", "plain", wrap=None))
    return impls


def _actions():
    """The same random actions for every implementation: indices [STEPS, NUM_ENVS] and their one-hots."""
    index = torch.randint(N_ACTIONS, (STEPS, NUM_ENVS), generator=torch.Generator().manual_seed(0))
    return index.numpy(), list(torch.nn.functional.one_hot(index, N_ACTIONS).unbind(0))


def _ours(lib, threads: int, rollout: bool) -> NS:
    env = lib.make_atari_env("ALE/Pong-v5", num_envs=NUM_ENVS, num_threads=threads, seed=0)
    _, one_hot = _actions()
    state = NS(td=env.reset(), t=0)

    def policy(td):
        action = one_hot[state.t]
        state.t = (state.t + 1) % STEPS
        return td.set("action", action)

    if rollout:

        def op() -> int:  # continues from the last step, as a collector does (no reset per call)
            out = env.rollout(STEPS, policy, auto_reset=False, tensordict=state.td, break_when_any_done=False)
            state.td = env.maybe_reset(env.step_mdp(out[:, -1]))
            return int(out.batch_size.numel())

    else:

        def op() -> int:
            td = state.td
            for a in one_hot:
                td.set("action", a)
                _, td = env.step_and_maybe_reset(td)
            state.td = td
            return STEPS * NUM_ENVS

    return NS(op=op, close=env.close)


def _envpool(envpool, threads: int) -> NS:
    env = envpool.make(
        "Pong-v5",
        env_type="gymnasium",
        num_envs=NUM_ENVS,
        batch_size=NUM_ENVS,
        num_threads=threads,
        seed=0,
        frame_skip=SETTINGS["frame_skip"],
        noop_max=SETTINGS["noop_max"],
        stack_num=SETTINGS["stack"],
        img_height=SETTINGS["size"],
        img_width=SETTINGS["size"],
        gray_scale=True,
        repeat_action_probability=SETTINGS["sticky"],
        max_episode_steps=SETTINGS["max_frames"] // SETTINGS["frame_skip"],
        episodic_life=False,
        reward_clip=False,
        use_fire_reset=False,
    )
    env.reset()
    return _step_loop(env)


def _step_loop(env) -> NS:
    """The op stepping a raw vector env (EnvPool's or ale-py's engine) through the shared action indices."""
    index, _ = _actions()

    def op() -> int:
        for a in index:
            env.step(a)
        return STEPS * NUM_ENVS

    return NS(op=op, close=env.close)


def _engine(threads: int) -> NS:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        "pong",
        NUM_ENVS,
        num_threads=threads,
        frameskip=SETTINGS["frame_skip"],
        noop_max=SETTINGS["noop_max"] + 1,  # as ours: up to noop_max no-ops
        stack_num=SETTINGS["stack"],
        img_height=SETTINGS["size"],
        img_width=SETTINGS["size"],
        repeat_action_probability=SETTINGS["sticky"],
        max_num_frames_per_episode=SETTINGS["max_frames"],
        reward_clipping=False,
        use_fire_reset=False,
    )
    env.reset(seed=0)
    return _step_loop(env)


def s_pong(threads: int, rollout: bool):
    def setup(impl: Impl) -> NS:
        if impl.name == "ours":
            return _ours(impl.TensorDict, threads, rollout)
        if impl.name == "envpool":
            return _envpool(impl.TensorDict, threads)
        return _engine(threads)

    return setup


def _teardown(ctx: NS) -> None:
    ctx.close()


def _name(threads: int, rollout: bool) -> str:
    how = f"rollout({STEPS})" if rollout else f"step loop ({STEPS} steps)"
    return f"Pong x{NUM_ENVS}, {threads} thread{'s' if threads > 1 else ''}: {how}"


def workloads(thread_counts: list[int]) -> list[Workload]:
    out = []
    for threads in thread_counts:
        for rollout in (False, True):
            note = "ours: rollout() also stacks the steps" if rollout else "ours: step_and_maybe_reset"
            out.append(
                Workload(
                    _name(threads, rollout),
                    f"{threads} threads",
                    s_pong(threads, rollout),
                    td=lambda c: c.op,
                    plain=lambda c: c.op,
                    note=note,
                    observe=lambda c, out: int(out),  # env steps per call: the same for every implementation
                    teardown=_teardown,
                )
            )
    return out


def environment(impls: list[Impl]) -> dict:
    return machine_info(impls, "ale_py", "gymnasium", "numpy")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (about a minute)")
    ap.add_argument("--out", default=str(HERE / "results" / "atari.json"))
    ap.add_argument("--threads", default="1,2", help="comma-separated C++ worker thread counts (default 1,2)")
    ap.add_argument("--samples", type=int, help="samples per workload and implementation (overrides the mode)")
    args = ap.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    torch.set_num_threads(1)  # our wrapper's tensor work; the games run in the engines' own threads
    torch.set_num_interop_threads(1)
    warnings.filterwarnings("ignore")
    cfg = run_config(args.quick, args.samples or (5 if args.quick else 15))
    impls = load()
    env = environment(impls)
    header = (
        f"torch {env['torch']}; 1 torch thread; {env['cpu_count']} CPUs; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
        + f"; Pong-v5 x{NUM_ENVS}, {STEPS} steps per call"
    )
    print(header + "\n", flush=True)
    results = run_all(workloads(thread_counts), impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "envpool",
        "plain",
        {"ours": "rl_envs", "envpool": "envpool", "plain": "ale-py engine"},
        max_over_floor=float("inf"),
        min_geomean_speedup=None,
    )
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    lines = [table, "", f"steps/s (env steps, {NUM_ENVS} envs x {STEPS} per call; median):"]
    derived, checks = {}, {}
    for r in rows:
        rates = {k: (None if v is None else STEPS * NUM_ENVS / (v * 1e-6)) for k, v in r["median_us"].items()}
        cells = ", ".join(f"{cmp.labels[k]} {'—' if v is None else f'{v:,.0f}'}" for k, v in rates.items())
        lines.append(f"  {r['name']}: {cells}")
        ratio = r["speedup_vs_peer"]
        derived[f"{r['name']}: ours / envpool steps/s"] = ratio
        checks[f"{r['name']}: >= {TARGET}x envpool's steps/s"] = ratio is not None and ratio >= TARGET
    lines.append("")
    lines += [f"  {k}: {'—' if v is None else f'{v:.2f}'}" for k, v in derived.items()]
    lines += [f"  {'met' if ok else 'NOT MET'}: {k}" for k, ok in checks.items()]
    text = "\n".join(lines)
    print("\n" + text)
    report = {
        "benchmark": "atari",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "settings": {"num_envs": NUM_ENVS, "steps_per_call": STEPS, **SETTINGS, "threads": thread_counts},
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "derived": derived,
        "targets_met": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=header + "\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
