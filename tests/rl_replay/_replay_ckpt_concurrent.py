"""Concurrency driver for tests/rl_replay/test_checkpoint_concurrency.py (run as a script).

Usage: python _replay_ckpt_concurrent.py ROLE ROOT N

- ``dump-A`` / ``dump-B``: dumps buffer A (or B) to ROOT/ckpt in a loop, at least N times and until
  ROOT/stop exists; writes ROOT/started-<X> after its first dump.
- ``load``: waits for both dumpers to have started, then loads ROOT/ckpt N times into a fresh
  buffer, checking that each load holds exactly A or B; then creates ROOT/stop.

Prints one JSON line: {"role", "count", "errors", "seen"}.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

torch.set_num_threads(1)

from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement  # noqa: E402
from tdict import TensorDict  # noqa: E402

ROLE, ROOT, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
PATH = os.path.join(ROOT, "ckpt")
LIMIT_S = 90.0  # never loop forever if a partner died


def make(name: str) -> ReplayBuffer:
    n = {"A": 10, "B": 20}[name]
    rb = ReplayBuffer(
        storage=LazyTensorStorage(64),
        sampler=SamplerWithoutReplacement(),
        generator=torch.Generator().manual_seed(n),
        batch_size=4,
    )
    g = torch.Generator().manual_seed(100 + n)
    rb.extend(TensorDict(obs=torch.randn(n, 3, generator=g), nxt={"r": torch.arange(n)}, batch_size=[n]))
    rb.sample()
    return rb


def which(rb: ReplayBuffer, refs: dict) -> str:
    name = {10: "A", 20: "B"}.get(len(rb))
    if name is None:
        return f"ERROR len {len(rb)}"
    ref, n = refs[name], len(rb)
    same = (
        torch.equal(rb.storage._storage[:n]["obs"], ref.storage._storage[:n]["obs"])
        and torch.equal(rb.storage._storage[:n]["nxt", "r"], ref.storage._storage[:n]["nxt", "r"])
        and rb.writer.state_dict() == ref.writer.state_dict()
        and rb.sampler.state_dict() == ref.sampler.state_dict()
        and torch.equal(rb._rng.get_state(), ref._rng.get_state())
    )
    return name if same else f"ERROR content of {name}"


def dump(name: str) -> dict:
    rb, errors, count, start = make(name), [], 0, time.monotonic()
    stop = os.path.join(ROOT, "stop")
    while (count < N or not os.path.exists(stop)) and time.monotonic() - start < LIMIT_S:
        try:
            rb.dumps(PATH)
        except Exception as err:  # noqa: BLE001 - reported to the test
            errors.append(f"{type(err).__name__}: {err}")
        count += 1
        if count == 1:
            open(os.path.join(ROOT, f"started-{name}"), "w").close()
    return {"role": ROLE, "count": count, "errors": errors[:5], "n_errors": len(errors), "seen": {}}


def load() -> dict:
    refs = {"A": make("A"), "B": make("B")}
    start = time.monotonic()
    while not all(os.path.exists(os.path.join(ROOT, f"started-{x}")) for x in "AB"):
        if time.monotonic() - start > LIMIT_S:
            return {"role": ROLE, "count": 0, "errors": ["the dumpers never started"], "n_errors": 1, "seen": {}}
        time.sleep(0.01)
    errors, seen = [], {"A": 0, "B": 0}
    try:
        for _ in range(N):
            rb = ReplayBuffer(storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=4)
            try:
                rb.loads(PATH)
                result = which(rb, refs)
            except Exception as err:  # noqa: BLE001 - reported to the test
                result = f"ERROR {type(err).__name__}: {err}"
            if result in seen:
                seen[result] += 1
            else:
                errors.append(result)
    finally:
        open(os.path.join(ROOT, "stop"), "w").close()
    return {"role": ROLE, "count": N, "errors": errors[:5], "n_errors": len(errors), "seen": seen}


if __name__ == "__main__":
    out = load() if ROLE == "load" else dump(ROLE.removeprefix("dump-"))
    print(json.dumps(out))
