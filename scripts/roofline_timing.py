"""Timing the kernels of a training step where they run (scripts/roofline.py).

Two ways, both in situ (the real step, its real inputs, nothing run twice):

- :meth:`KernelTimer.wrap`: a function looked up as a module attribute at call time (the Numba kernels
  are called as ``module.kernel(...)`` or as module globals from plain Python functions) is replaced by a
  wrapper that times each call and keeps its arguments and result for the work count;
- :meth:`KernelTimer.region`: a torch module or function whose backward runs inside autograd (the NeRF's
  MLPs, its volume compositing): the forward is timed directly; the backward from the moment the
  gradient reaches the region's outputs to the moment the last one reaches its inputs (identity autograd
  functions on both sides stamp the times; autograd on the CPU runs one node at a time, so that span is
  the region's backward plus whatever the engine interleaves, which for a chain such as an MLP is
  nothing).

Times add up per step (:meth:`KernelTimer.start_step` / :meth:`KernelTimer.end_step`); the calls of
the last step are kept for the work count.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable

import torch


class _Stamp(torch.autograd.Function):
    """Identity; its backward calls ``hook()`` (a time stamp) before passing the gradient on."""

    @staticmethod
    def forward(ctx, hook, x):
        ctx.hook = hook
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.hook()
        return None, g


class _Span:
    """One region call's backward: first stamp on its outputs, last stamp on its inputs."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None

    def output_reached(self) -> None:
        if self.start is None:
            self.start = time.perf_counter()

    def input_reached(self) -> None:
        self.end = time.perf_counter()

    def seconds(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return max(0.0, self.end - self.start)


def _stamped(x, hook):
    if isinstance(x, torch.Tensor) and x.requires_grad:
        return _Stamp.apply(hook, x)
    return x


class KernelTimer:
    """Per-step seconds of named kernels, and the last step's calls (args, result) of each."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._now: dict[str, float] = defaultdict(float)
        self._calls: dict[str, list] = defaultdict(list)
        self._spans: list[tuple[str, _Span]] = []
        self.steps: list[dict[str, float]] = []
        self.last_calls: dict[str, list] = {}

    # ------------------------------------------------------------------ patching
    def wrap(self, owner, attr: str, name: str) -> None:
        """Time every call of ``owner.attr`` under ``name`` (owner: a module, class or object)."""
        orig = getattr(owner, attr)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            out = orig(*args, **kwargs)
            self._now[name] += time.perf_counter() - t
            self._calls[name].append((args, kwargs, out))
            return out

        setattr(owner, attr, timed)
        self._undo.append(lambda: setattr(owner, attr, orig))

    def region(self, owner, attr: str, name: str) -> None:
        """Time ``owner.attr`` (a function of tensors returning a tensor or a tuple of them) forward under
        ``name + " forward"`` and its autograd backward under ``name + " backward"``."""
        orig = getattr(owner, attr)

        def timed(*args, **kwargs):
            span = _Span()
            if torch.is_grad_enabled():
                args = tuple(_stamped(a, span.input_reached) for a in args)
            t = time.perf_counter()
            out = orig(*args, **kwargs)
            self._now[name + " forward"] += time.perf_counter() - t
            self._calls[name + " forward"].append((args, kwargs, out))
            if not torch.is_grad_enabled():
                return out
            self._spans.append((name + " backward", span))
            self._calls[name + " backward"].append((args, kwargs, out))
            if isinstance(out, tuple):
                return tuple(_stamped(o, span.output_reached) for o in out)
            return _stamped(out, span.output_reached)

        setattr(owner, attr, timed)
        self._undo.append(lambda: setattr(owner, attr, orig))

    def restore(self) -> None:
        """Put every wrapped attribute back (in reverse order)."""
        while self._undo:
            self._undo.pop()()

    # ------------------------------------------------------------------ steps
    def start_step(self) -> None:
        self._now = defaultdict(float)
        self._calls = defaultdict(list)
        self._spans = []

    def end_step(self, record: bool) -> None:
        """Close the step's backward spans; keep its times (``record``) and its calls."""
        for name, span in self._spans:
            self._now[name] += span.seconds()
        if record:
            self.steps.append(dict(self._now))
            self.last_calls = dict(self._calls)
