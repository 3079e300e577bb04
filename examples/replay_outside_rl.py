"""rl-replay outside RL: an image/label dataset stored in a replay buffer and read epoch by epoch.

Needs only ``pip install rl-replay`` (which brings torch and rl-tdict): no environment, no
collector. The buffer holds synthetic 3x32x32 uint8 images with integer labels; a
``SamplerWithoutReplacement`` turns ``sample()`` into a shuffled data loader (each item exactly
once per epoch), ``prefetch`` prepares batches in a background thread and a sample-time transform
converts images to normalised floats. Each epoch checks that the per-class counts it saw equal the
dataset's, trains a small linear classifier, and prints one line.

Run: ``python examples/replay_outside_rl.py [--size 10000] [--batch-size 256] [--epochs 3]``.
"""

from __future__ import annotations

import argparse
import math
import tempfile

import torch
from tdict import TensorDict

from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement

NUM_CLASSES = 10


def make_dataset(size: int, seed: int = 0) -> TensorDict:
    """Synthetic images whose mean colour depends on the label (so a linear model can learn it)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (size,), generator=g)
    noise = torch.randint(0, 128, (size, 3, 32, 32), generator=g)
    palette = torch.linspace(0, 127, NUM_CLASSES).round().long()
    tint = torch.stack([palette[labels], palette.flip(0)[labels], palette[(labels * 3) % NUM_CLASSES]], -1)
    images = (noise + tint.view(size, 3, 1, 1)).clamp(0, 255).to(torch.uint8)
    return TensorDict(image=images, label=labels, batch_size=[size])


def to_float(batch: TensorDict) -> TensorDict:
    """Sample-time transform: uint8 images stay compact in storage, the model sees floats in [0, 1]."""
    batch.set("pixels", batch.get("image").float().div_(255.0))
    return batch


def make_buffer(storage, size: int, batch_size: int, seed: int) -> ReplayBuffer:
    return ReplayBuffer(
        storage=storage,
        sampler=SamplerWithoutReplacement(drop_last=False, shuffle=True),
        batch_size=batch_size,
        prefetch=2,
        transform=to_float,
        generator=torch.Generator().manual_seed(seed),
    )


def run_epochs(rb: ReplayBuffer, dataset: TensorDict, epochs: int, batch_size: int, name: str) -> bool:
    size = dataset.batch_size[0]
    expected = torch.bincount(dataset["label"], minlength=NUM_CLASSES)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, NUM_CLASSES)  # on per-channel means
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    batches_per_epoch = math.ceil(size / batch_size)
    all_ok = True
    for epoch in range(epochs):
        seen = torch.zeros(size, dtype=torch.int64)
        counts = torch.zeros(NUM_CLASSES, dtype=torch.int64)
        correct = total_loss = 0.0
        for _ in range(batches_per_epoch):
            batch, info = rb.sample(return_info=True)
            seen += torch.bincount(info["index"], minlength=size)
            counts += torch.bincount(batch["label"], minlength=NUM_CLASSES)
            features = batch["pixels"].mean(dim=(-1, -2))
            logits = model(features)
            loss = torch.nn.functional.cross_entropy(logits, batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += float(loss.detach()) * len(batch)
            correct += float((logits.argmax(-1) == batch["label"]).sum())
        every_item_once = bool((seen == 1).all())
        counts_match = bool((counts == expected).all())
        all_ok &= every_item_once and counts_match
        print(
            f"[{name}] epoch {epoch}: {batches_per_epoch} batches, each image once: {every_item_once}, "
            f"class counts match dataset: {counts_match}, loss {total_loss / size:.3f}, accuracy {correct / size:.3f}"
        )
    return all_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="number of images")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    dataset = make_dataset(args.size)
    counts = torch.bincount(dataset["label"], minlength=NUM_CLASSES).tolist()
    print(f"dataset: {args.size} images {list(dataset['image'].shape[1:])} uint8, per-class counts {counts}")

    rb = make_buffer(LazyTensorStorage(args.size), args.size, args.batch_size, seed=1)
    rb.extend(dataset)
    print(f"LazyTensorStorage: {len(rb)} items stored")
    ok = run_epochs(rb, dataset, args.epochs, args.batch_size, "memory")

    try:  # memory-mapped files: the same code, with the data on disk
        from rl_replay import LazyMemmapStorage
    except (ImportError, AttributeError):
        LazyMemmapStorage = None
    if LazyMemmapStorage is not None:
        with tempfile.TemporaryDirectory(prefix="replay_outside_rl_") as scratch:
            mm = make_buffer(
                LazyMemmapStorage(args.size, scratch_dir=scratch, existsok=True), args.size, args.batch_size, seed=2
            )
            mm.extend(dataset)
            print(f"LazyMemmapStorage: {len(mm)} items stored under a scratch directory")
            ok &= run_epochs(mm, dataset, 1, args.batch_size, "memmap")
            del mm
    print("all epochs consistent with the dataset:", ok)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
