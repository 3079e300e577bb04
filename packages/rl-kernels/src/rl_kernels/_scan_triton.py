"""Triton kernel for the reset-aware reverse scan (imported only when the Triton backend is chosen).

One program owns ``BLOCK_R`` rows and walks time backwards in chunks of ``BLOCK_T`` steps: inside a
chunk, ``tl.associative_scan`` composes the affine maps ``y -> x_t + c_t * y`` from the chunk's end;
the chunk's first output is the carry into the chunk before it. Every element is read and written
once, so the kernel is bound by memory traffic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["block_sizes", "reverse_scan"]


@triton.jit
def _compose(a_later, b_later, a_now, b_now):
    # (y -> a_now + b_now * y) after (y -> a_later + b_later * y): the map from y past the later step to y_now
    return a_now + b_now * a_later, b_now * b_later


@triton.jit
def _reverse_scan_kernel(
    x_ptr,
    c_ptr,
    done_ptr,
    y_ptr,
    rows,
    steps,
    n_chunks,
    FULL_COEF: tl.constexpr,
    HAS_DONE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    pid = tl.program_id(0)
    r = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = r < rows
    row_start = r.to(tl.int64) * steps
    cols = tl.arange(0, BLOCK_T)
    carry = tl.zeros([BLOCK_R], dtype=y_ptr.dtype.element_ty)
    if not FULL_COEF:
        c_scalar = tl.load(c_ptr)
    k = 0
    while k < n_chunks:  # (a while loop: Triton's interpreter cannot index range() by a runtime bound)
        t = (n_chunks - 1 - k) * BLOCK_T + cols
        mask = row_ok[:, None] & (t < steps)[None, :]
        offs = row_start[:, None] + t[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        if FULL_COEF:
            c = tl.load(c_ptr + offs, mask=mask, other=0.0)
        else:
            c = tl.where(mask, c_scalar, 0.0).to(x.dtype)
        if HAS_DONE:
            stop = tl.load(done_ptr + offs, mask=mask, other=1)
            c = tl.where(stop != 0, 0.0, c).to(x.dtype)
        # past the last step: x = c = 0, the map to zero, so y_{T} = 0 without a special case
        a, b = tl.associative_scan((x, c), 1, _compose, reverse=True)
        y = a + b * carry[:, None]
        tl.store(y_ptr + offs, y, mask=mask)
        carry = tl.sum(tl.where(cols[None, :] == 0, y, 0.0), 1)
        k += 1


def block_sizes(rows: int, steps: int) -> tuple[int, int, int]:
    """``(BLOCK_R, BLOCK_T, num_warps)``: chunks of up to 256 steps, about 512 elements per program.

    Small programs keep many rows in flight (the chunks of a row are sequential); on an H200 at
    ``[4096, 1000]`` chunk lengths 64-512 with 1-2 warps were within 10% of each other.

    Examples:
        >>> block_sizes(4096, 1000)
        (2, 256, 2)
    """
    block_t = min(triton.next_power_of_2(max(steps, 1)), 256)
    block_r = min(triton.next_power_of_2(max(rows, 1)), max(1, 512 // block_t))
    return int(block_r), int(block_t), 2 if block_r * block_t >= 512 else 1


def reverse_scan(
    x: torch.Tensor,
    coef: torch.Tensor,
    done: torch.Tensor | None,
    block_t: int | None = None,
    block_r: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """``y_t = x_t + coef_t * (1 - done_t) * y_{t+1}`` over contiguous ``[R, T]`` rows (``coef``: ``[R, T]`` or
    ``[1]``, same dtype as ``x``; ``done``: bool ``[R, T]`` or None). ``block_t`` / ``block_r`` / ``num_warps``
    override the launch configuration (tests, tuning).

    Examples:
        >>> import torch
        >>> from rl_kernels._backend import interpreting
        >>> if torch.cuda.is_available() or interpreting():
        ...     reverse_scan(torch.ones(1, 3), torch.tensor([0.5]), None).tolist()
        ... else:
        ...     [[1.75, 1.5, 1.0]]
        [[1.75, 1.5, 1.0]]
    """
    rows, steps = x.shape
    y = torch.empty_like(x)
    br, bt, nw = block_sizes(rows, steps)
    if block_t is not None:
        bt = block_t
    if block_r is not None:
        br = block_r
    full = coef.numel() > 1
    grid = (triton.cdiv(rows, br),)
    _reverse_scan_kernel[grid](
        x,
        coef,
        x if done is None else done.view(torch.uint8),
        y,
        rows,
        steps,
        triton.cdiv(steps, bt),
        FULL_COEF=full,
        HAS_DONE=done is not None,
        BLOCK_R=br,
        BLOCK_T=bt,
        num_warps=num_warps or nw,  # pyright: ignore[reportCallIssue]  # a launch option triton's stubs do not declare
    )
    return y
