"""rl-llm benchmarks.

``logprobs``: peak memory of the log-probs of chosen tokens, forward + backward, the full-logits path
(``log_softmax`` of ``[B, T, V]`` logits, then gather) against rl_llm's chunked one
(``token_log_probs_chunked``), at vocabulary 32,000, batch 8, length 512, hidden 512. Each variant
runs in its own process; the figure is the growth of the process's peak resident memory over the
inputs (``ru_maxrss``), median of ``--repeats`` processes.

    hatch run bench:llm logprobs [--chunk-size 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _one_logprobs(variant: str, vocab: int, batch: int, length: int, hidden: int, chunk: int) -> float:
    """Peak memory growth (MB) of one forward + backward, measured in this process."""
    import torch

    from rl_llm.losses import token_log_probs_chunked

    torch.manual_seed(0)
    torch.set_num_threads(1)
    h = torch.randn(batch, length, hidden, requires_grad=True)
    w = (torch.randn(vocab, hidden) * 0.02).requires_grad_()
    t = torch.randint(0, vocab, (batch, length))
    small = token_log_probs_chunked(h[:1, :4], w, None, t[:1, :4], chunk_size=4)  # libraries loaded, kernels warm
    small.sum().backward()
    h.grad = w.grad = None
    base = _peak_mb()
    if variant == "full":
        lp = (h @ w.T).log_softmax(-1).gather(-1, t[..., None])[..., 0]
    else:
        lp = token_log_probs_chunked(h, w, None, t, chunk_size=chunk)
    lp.sum().backward()
    return _peak_mb() - base


def logprobs(args: argparse.Namespace) -> dict:
    rows = {}
    for variant in ("full", "chunked"):
        peaks = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [sys.executable, __file__, "_logprobs_child", variant, str(args.chunk_size)],
                capture_output=True,
                text=True,
                check=True,
            )
            peaks.append(float(out.stdout.strip().splitlines()[-1]))
        rows[variant] = statistics.median(peaks)
        print(
            f"{variant:8s}: peak memory growth {rows[variant]:8.1f} MB (runs: {', '.join(f'{p:.0f}' for p in peaks)})",
            flush=True,
        )
    ratio = rows["chunked"] / rows["full"]
    print(f"chunked / full: {ratio:.3f}x (vocab 32000, batch 8, length 512, hidden 512, chunk {args.chunk_size})")
    return {
        "peak_mb": rows,
        "ratio": ratio,
        "chunk_size": args.chunk_size,
        "vocab": 32000,
        "batch": 8,
        "length": 512,
        "hidden": 512,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_logprobs_child":
        print(_one_logprobs(sys.argv[2], 32000, 8, 512, 512, int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["logprobs"])
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = {
        "command": " ".join(["python", str(Path(__file__).resolve().relative_to(REPO)), *sys.argv[1:]]),
        **logprobs(args),
    }
    out = RESULTS / f"llm_{args.what}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
