"""Spawn-child targets for test_memmap_storage.py (importable by name: the test puts this folder on sys.path)."""

from __future__ import annotations

import time
import traceback

import torch
from tdict import TensorDict


def item_values(ids: torch.Tensor) -> TensorDict:
    """The transition written for each id (a pure function of the id, so a reader can check it)."""
    ids = ids.to(torch.int64)
    f = ids.to(torch.float32)
    n = ids.shape[0]
    return TensorDict(
        {
            "id": ids,
            "observation": f[:, None] + torch.arange(17.0),
            "action": -f[:, None] - torch.arange(6.0),
            "next": {"observation": f[:, None] + 1 + torch.arange(17.0), "reward": f * 0.5, "done": ids % 7 == 0},
        },
        batch_size=[n],
    )


def writer(rb, total: int, chunk: int, results) -> None:
    try:
        for start in range(0, total, chunk):
            rb.extend(item_values(torch.arange(start, min(start + chunk, total))))
            time.sleep(0.002)
        results.put(("writer", "ok", len(rb)))
    except BaseException:
        results.put(("writer", "error", traceback.format_exc()))
        raise


def sampler(rb, total: int, results, timeout: float) -> None:
    try:
        deadline = time.monotonic() + timeout
        draws = 0
        seen_len = 0
        while time.monotonic() < deadline:
            n = len(rb)
            if n == 0:
                time.sleep(0.002)
                continue
            batch, info = rb.sample(64, return_info=True)
            index = info["index"]
            after = len(rb)  # the writer may have grown the buffer meanwhile
            if not bool((index < after).all()):
                raise AssertionError(f"sampled index {int(index.max())} >= len {after}")
            expected = item_values(batch["id"])
            for key, value in expected.items(include_nested=True, leaves_only=True):
                if not torch.equal(batch[key], value):
                    raise AssertionError(f"sampled {key!r} differs from what the writer wrote")
            if not torch.equal(batch["id"], index):
                raise AssertionError("item ids differ from their storage index")
            draws += 1
            seen_len = max(seen_len, n)
            if n == total and draws >= 20:
                break
        results.put(("sampler", "ok", (draws, seen_len)))
    except BaseException:
        results.put(("sampler", "error", traceback.format_exc()))
        raise


def fail_now(rb, results) -> None:
    rb.extend(TensorDict(other=torch.zeros(2), batch_size=[2]))  # wrong keys: raises in the child
