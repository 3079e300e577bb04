"""A short tour of the TensorDict container: ``hatch run demo``.

A TensorDict maps keys to tensors (or to nested TensorDicts) that share leading *batch*
dimensions. Here the batch is ``[4, 3]``: 4 environments by 3 time steps of a rollout. Every
operation on the batch (indexing, reshaping, stacking, saving) applies to all entries at once.

The API follows tensordict 0.14; see README's "Migrating from TorchRL / tensordict" section for
the few deliberate differences (e.g. per-step scalars such as rewards carry no trailing
singleton dimension, so ``reward`` here has shape ``[4, 3]``, not ``[4, 3, 1]``).
"""

from __future__ import annotations

import tempfile

import torch

from tdict import TensorDict


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def build() -> TensorDict:
    n_envs, n_steps, obs_dim = 4, 3, 5
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "observation": torch.randn(n_envs, n_steps, obs_dim, generator=g),
            "action": torch.randint(0, 2, (n_envs, n_steps), generator=g),
            "next": {
                "observation": torch.randn(n_envs, n_steps, obs_dim, generator=g),
                "reward": torch.randn(n_envs, n_steps, generator=g),
                "done": torch.tensor([[False, False, True]] * n_envs),
            },
        },
        batch_size=[n_envs, n_steps],
    )


def main() -> None:
    td = build()

    section("construction")
    print(td)
    print("batch_size:", td.batch_size)
    leaves = td.keys(include_nested=True, leaves_only=True)
    print("leaf keys: ", sorted(k if isinstance(k, str) else ".".join(k) for k in leaves))
    print("td['next', 'reward'].shape:", tuple(td["next", "reward"].shape))
    print("get with a default:", td.get("value", None))
    try:
        td["value"]
    except KeyError as err:
        print("missing key ->", type(err).__name__)

    section("indexing")
    print("td[0]          ->", td[0].batch_size, "(first env, all steps)")
    print("td[:, -1]      ->", td[:, -1].batch_size, "(last step of every env)")
    print("td[1:3, ::2]   ->", td[1:3, ::2].batch_size)
    mask = td["action"] == 1
    picked = td[mask]
    print("td[action == 1] ->", picked.batch_size, f"({int(mask.sum())} steps)")
    print("rows yielded by iteration:", [tuple(row.batch_size) for row in td])

    section("reshape")
    flat = td.reshape(-1)
    print("reshape(-1)      ->", flat.batch_size, "observation", tuple(flat["observation"].shape))
    print("view(2, 6)       ->", td.view(2, 6).batch_size)
    print("permute(1, 0)    ->", td.permute(1, 0).batch_size)
    print("unsqueeze(0)     ->", td.unsqueeze(0).batch_size)
    print("flatten/unflatten round trip:", bool((flat.unflatten(0, (4, 3)) == td).all()))

    section("stack and cat")
    stacked = torch.stack([td, td.clone()], dim=0)
    print("torch.stack      ->", type(stacked).__name__, stacked.batch_size)
    print("torch.cat        ->", torch.cat([td, td], dim=0).batch_size)
    print("unbind(0)        ->", [tuple(t.batch_size) for t in td.unbind(0)])

    section("apply")
    obs = td.select("observation", ("next", "observation"))
    clipped = obs.apply(lambda x: x.clamp(-1.0, 1.0))
    print("max after clamp:", float(clipped["observation"].max()))
    delta = td["next"].select("observation").apply(lambda nxt, cur: nxt - cur, td.select("observation"))
    print("next obs - obs  ->", tuple(delta["observation"].shape))
    as_float = td.apply(lambda x: x.float())
    print(
        "dtypes after apply(float):",
        sorted({str(v.dtype) for v in as_float.values(include_nested=True, leaves_only=True)}),
    )

    section("arithmetic")
    numeric = td.exclude("action", ("next", "done"))
    doubled = numeric * 2
    print("(td * 2 - td) == td:", bool(((doubled - numeric) == numeric).all()))
    print(
        "(td + td).abs() leaf sum:", round(float(sum(v.sum() for v in (numeric + numeric).abs().values(True, True))), 4)
    )
    print("mean reward per env:", [round(r, 3) for r in td["next", "reward"].mean(-1).tolist()])
    returns = td["next", "reward"].flip(-1).cumsum(-1).flip(-1)
    td.set("return", returns)
    print("added key 'return' with shape", tuple(td["return"].shape))

    section("in-place updates")
    td[0] = td[1]
    print("td[0] = td[1] -> equal:", bool((td[0] == td[1]).all()))
    td.update({"next": {"reward": torch.zeros(4, 3)}})
    print("rewards after update:", float(td["next", "reward"].abs().sum()))

    section("memory-mapped storage")
    with tempfile.TemporaryDirectory() as prefix:
        saved = td.memmap(prefix)
        print("is_memmap:", saved.is_memmap(), "| files under prefix hold every leaf")
        loaded = TensorDict.load_memmap(prefix)
        print("reloaded batch_size:", loaded.batch_size)
        print("reloaded == original:", bool((loaded == td).all()))
        loaded["next", "reward"][0, 0] = 1.0  # writes go straight to the mapped file
        print("write through the mapping, then reload:", float(TensorDict.load_memmap(prefix)["next", "reward"][0, 0]))
        del saved, loaded


if __name__ == "__main__":
    main()
