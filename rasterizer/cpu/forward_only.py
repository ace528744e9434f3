"""Running an autograd Function's forward without autograd when nothing will be differentiated.

``Function.apply`` records a graph node, wraps the outputs and checks the inputs' wrappers on every call
(15-25 us on the 2-vCPU VM), and the node keeps what ``ctx`` saved alive as long as the outputs live. A
render without gradients (grad mode off, or no input requiring grad) needs none of it: :func:`apply` then
calls ``forward`` with :data:`NO_CTX`, which drops what is saved. Same outputs (the same forward runs).
"""

from __future__ import annotations

import torch
from torch import Tensor


class _NoContext:
    """Stands in for ``ctx`` outside autograd: saving, marking and attributes are accepted and dropped."""

    def save_for_backward(self, *tensors) -> None:
        pass

    def mark_non_differentiable(self, *tensors) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass

    def __setattr__(self, name: str, value) -> None:
        pass


NO_CTX = _NoContext()


def needs_graph(*args) -> bool:
    """Whether grad mode is on and a tensor among ``args`` requires grad (then autograd must record)."""
    return torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args)


def apply(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)`` when a graph is needed (:func:`needs_graph`), else its ``forward`` with
    :data:`NO_CTX`."""
    if needs_graph(*args):
        return function.apply(*args)
    return function.forward(NO_CTX, *args)
