"""Targets for worker / child processes of the tdict multiprocessing tests.

They live in their own module, importable by name from a fresh interpreter (test modules
imported by pytest's importlib mode are not), so spawn and forkserver children can unpickle them.
The tests put this folder on ``sys.path`` (inherited by the children). Keep imports minimal.
"""

from __future__ import annotations

import os
import time

import torch


# --------------------------------------------------------------------------- td.map functions
def add_y(td):
    """A new collection: the chunk plus ``y = 2 x + 1`` and a nested ``("n", "w") = z.sum(-1)``."""
    out = td.clone()
    out["y"] = td["x"] * 2 + 1
    out["n", "w"] = td["n", "z"].sum(-1)
    return out


def leaves_plus_one(td):
    return td.apply(lambda t: t + 1)


def return_none(td):
    return None


def none_on_first(td):
    """None for the chunk holding element 0 along dim 0 of ``idx``, the chunk itself otherwise."""
    if bool((td["idx"] == 0).any()):
        return None
    return td.clone()


def x_plus_one(td):
    return td["x"] + 1


def add_one_inplace(td):
    """Writes into the chunk (a view of the parent's shared memory); returns nothing."""
    td["x"].add_(1)
    return None


def worker_pid(td):
    """A batch-shaped tensor holding this worker's pid."""
    return torch.full(td.batch_size, os.getpid(), dtype=torch.int64)


def exit_on_last(td):
    """Hard-exit the worker that gets the chunk holding the largest ``idx``; others pass through."""
    if bool((td["idx"] == td["idx_max"]).any()):
        os._exit(1)
    return td.clone()


def exit_always(td):
    os._exit(3)


def raise_value_error(td):
    raise ValueError(f"boom on a chunk of batch size {list(td.batch_size)}")


def call_sys_exit(td):
    raise SystemExit(7)


def sleep_long(td):
    time.sleep(120)
    return td


def draw_random(td):
    return torch.rand(td.batch_size)


# --------------------------------------------------------------------------- shared-memory children
def write_shared(td):
    """Child of test_shared_memory: write into a shared TensorDict (batch [4, 2]) received from the parent."""
    from tdict import TensorDict

    td["a"].fill_(1.0)
    td["nested", "b"].add_(2)
    td.set_(("nested", "deeper", "c"), torch.full_like(td["nested", "deeper", "c"], 7.0))
    td[1] = TensorDict(
        {
            "a": torch.full((2, 3), 5.0),
            "nested": {"b": torch.full((2,), -1), "deeper": {"c": torch.full((2, 2, 2), 9.0)}},
        },
        batch_size=[2],
    )
    td[2:, 1] = 0
    td["a"][0, 0] = 42.0


def receive_and_report(inbox, outbox):
    """Child: take a TensorDict from ``inbox``, write a marker into it, report whether it is shared."""
    td = inbox.get(timeout=60)
    td["a"].fill_(3.0)
    td["nested", "b"].fill_(4)
    outbox.put(bool(td.is_shared()))


def set_y_on_chunk(td):
    """tensordict's documented pattern: add a key to the chunk itself and return it."""
    td.set("y", td.get("x") + 1)
    return td
