"""A tqdm progress bar over the trainer's frames, as a hook: frames, frames/s, the latest evaluation
return and the time left."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .hooks import TrainerHookBase
from tdict.validation import check_positive_int

__all__ = ["ProgressBar"]

_BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} frames [{elapsed}{postfix}]"


def _clock_str(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class ProgressBar(TrainerHookBase):
    """Shows training progress on a tqdm bar: frames done, frames/s, the latest evaluation return, time left.

    Registered at ``"post_steps_log"``, after the hooks registered before it (register it after
    :class:`LogValidationReward` so a fresh evaluation shows at once). Every call moves the bar to the
    trainer's ``collected_frames`` and sets :attr:`postfix`:

    - ``"frames"``: the trainer's ``collected_frames``;
    - ``"frames/s"``: frames per second over the last ``rate_window`` calls (since registration at
      first), measured with ``clock``;
    - ``"eval return"``: the latest value the trainer logged under ``eval_key`` (``None`` before the
      first evaluation);
    - ``"eta_s"``: seconds left at that rate (``None`` while the rate is unknown).

    The bar reads ``"...| 4096/12000 frames [00:21, frames/s=195, eval=-812.4, left=00:40]"``. It
    closes itself once ``total_frames`` are reached (or call :meth:`close`).

    Args:
        total_frames: the bar's length; ``None``: the trainer's ``total_frames``.
        eval_key: the logged name shown as the evaluation return (``LogValidationReward``'s
            ``"total_r_evaluation"`` by default).
        rate_window: number of calls the frame rate is measured over.
        clock: returns seconds (``time.perf_counter``); tests pass a fake one.
        **tqdm_kwargs: passed to ``tqdm`` (``file``, ``mininterval``, ``disable``, ``desc``, ...).

    Raises:
        ImportError: naming the ``tqdm`` package when it is not installed (at construction).

    Examples:
        >>> import io, torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import ProgressBar, Trainer
        >>> class Loss(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = nn.Parameter(torch.zeros(()))
        ...     def forward(self, td):
        ...         return TensorDict(loss=(self.w - td["y"]).pow(2).mean())
        >>> loss = Loss()
        >>> trainer = Trainer(collector=[TensorDict(y=torch.ones(2, 5), batch_size=[2, 5])] * 3, total_frames=30,
        ...                   optim_steps_per_batch=1, loss_module=loss, optimizer=torch.optim.SGD(loss.parameters(), lr=0.1))
        >>> trainer.register_op("post_steps_log", lambda batch: {"total_r_evaluation": -100.0})
        >>> bar = ProgressBar(file=io.StringIO())
        >>> bar.register(trainer)
        >>> trainer.train()
        >>> bar.postfix["frames"], bar.postfix["eval return"]
        (30, -100.0)
    """

    def __init__(
        self,
        total_frames: int | None = None,
        *,
        eval_key: str = "total_r_evaluation",
        rate_window: int = 20,
        clock: Callable[[], float] = time.perf_counter,
        **tqdm_kwargs: Any,
    ) -> None:
        try:
            from tqdm import tqdm
        except ImportError as err:
            raise ImportError(
                "ProgressBar needs the 'tqdm' package, which is not installed (pip install tqdm)."
            ) from err
        if total_frames is not None:
            check_positive_int("ProgressBar", "total_frames", total_frames)
        if not isinstance(eval_key, str) or not eval_key:
            raise ValueError(f"ProgressBar: eval_key must be a non-empty string (a logged name), got {eval_key!r}.")
        if not callable(clock):
            raise TypeError(f"ProgressBar: clock must be callable (returning seconds), got {type(clock).__name__}.")
        self._tqdm = tqdm
        self.total_frames = total_frames
        self.eval_key = eval_key
        self.rate_window = check_positive_int("ProgressBar", "rate_window", rate_window)
        self.clock = clock
        self.tqdm_kwargs = tqdm_kwargs
        self.trainer: Any = None
        self.bar: Any = None
        self.postfix: dict[str, Any] = {}
        self._marks: deque[tuple[float, int]] = deque(maxlen=self.rate_window + 1)

    def register(self, trainer: Any, name: str | None = None) -> None:
        if self.trainer is not None:
            raise RuntimeError(
                "ProgressBar.register: this bar is already registered with a trainer; make one per trainer."
            )
        self.trainer = trainer
        if self.total_frames is None:
            self.total_frames = trainer.total_frames
        trainer.register_op("post_steps_log", self)
        self._marks.append((self.clock(), trainer.collected_frames))

    def _open(self, frames: int) -> None:
        kwargs = {"unit": "frames", "bar_format": _BAR_FORMAT, "dynamic_ncols": True, **self.tqdm_kwargs}
        assert self.total_frames is not None  # set by register at the latest
        self.bar = self._tqdm(total=self.total_frames, initial=min(self._marks[-1][1], self.total_frames), **kwargs)

    def __call__(self, batch: Any = None) -> None:
        if self.trainer is None:
            raise RuntimeError(
                "ProgressBar: call register(trainer) first; the bar reads the trainer's frames and logged values."
            )
        frames = self.trainer.collected_frames
        if self.bar is None:
            self._open(frames)
        assert self.bar is not None  # opened above
        now = self.clock()
        self._marks.append((now, frames))
        then, frames_then = self._marks[0]
        rate = (frames - frames_then) / (now - then) if now > then else None
        left = max(self.total_frames - frames, 0)
        eval_return = self.trainer.last_logged.get(self.eval_key)
        self.postfix = {
            "frames": frames,
            "frames/s": rate,
            "eval return": eval_return,
            "eta_s": None if not rate else left / rate,
        }
        self.bar.set_postfix(
            {
                "frames/s": "?" if rate is None else f"{rate:.0f}",
                "eval": "-" if eval_return is None else f"{eval_return:.1f}",
                "left": "?" if self.postfix["eta_s"] is None else _clock_str(self.postfix["eta_s"]),
            },
            refresh=False,
        )
        self.bar.update(min(frames, self.total_frames) - self.bar.n)
        if frames >= self.total_frames:
            self.close()

    def close(self) -> None:
        """Closes the bar (a later call opens a new one)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
