"""One Adam step without torch.optim's per-group Python: the same fused update kernel, called directly.

A 3DGS model's ``torch.optim.Adam(fused=True)`` holds one parameter group per parameter (six), and
``optimizer.step()`` walks each through the optimiser's generic machinery (hooks, grad-mode and profiler
contexts, grouping tensors by device and dtype, argument checks): about 1.4 ms of Python a step on the 2-vCPU
VM against 0.3 ms in the update kernel itself (cProfile of bench_train's step, 1 thread). :func:`adam_step`
initialises the state exactly as ``torch.optim.Adam`` does and calls ``torch._fused_adam_`` once per group
with the group's hyper-parameters: the same kernel on the same tensors, so parameters, moments and step
counts are bit-identical to ``optimizer.step()`` (``tests/recon/core/test_adam_step.py``), and the
optimiser's ``state_dict`` / ``load_state_dict`` are unchanged.

Anything else goes through ``optimizer.step()`` (:func:`plain_fused_adam` says which): another optimiser,
unfused groups, amsgrad, capturable or differentiable groups, AdamW's decoupled decay, registered step hooks,
sparse gradients or tensors not on the CPU; and everything when this torch lacks the private names used
here (``torch._fused_adam_``, ``torch.optim.optimizer``'s global hook dictionaries): they are looked up once,
so a torch release that renames them only loses the 1 ms, never a step.
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as _optimizer_module

FUSED_ADAM = getattr(torch, "_fused_adam_", None)  # private: None on a torch without it -> optimizer.step()
GLOBAL_HOOKS = tuple(getattr(_optimizer_module, name, None)
                     for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"))

PLAIN_FLAGS = {"fused": True, "amsgrad": False, "capturable": False, "differentiable": False}


def plain_fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    """Whether :func:`adam_step` may replace ``optimizer.step()``: exactly ``torch.optim.Adam`` with every group
    fused, without amsgrad, capturable, differentiable or decoupled weight decay, and no step hooks."""
    if type(optimizer) is not torch.optim.Adam or FUSED_ADAM is None or any(h is None for h in GLOBAL_HOOKS):
        return False
    if (getattr(optimizer, "_optimizer_step_pre_hooks", True) or getattr(optimizer, "_optimizer_step_post_hooks", True)
            or any(GLOBAL_HOOKS)):
        return False
    return all(all(group.get(k) == v for k, v in PLAIN_FLAGS.items()) and not group.get("decoupled_weight_decay")
               and not any(torch.is_tensor(v) for v in (group["lr"], *group["betas"]))
               for group in optimizer.param_groups)


def group_tensors(optimizer: torch.optim.Adam, group: dict) -> tuple[list, list, list, list, list] | None:
    """(params, grads, exp_avgs, exp_avg_sqs, steps) of the group's parameters that have a gradient, their state
    created as ``torch.optim.Adam`` creates it (zero moments, a float32 step count 0 on the parameter's
    device); None when one of them cannot take the direct call (not on the CPU, sparse or complex)."""
    params, grads, avgs, sqs, steps = [], [], [], [], []
    for p in group["params"]:
        g = p.grad
        if g is None:
            continue
        if p.device.type != "cpu" or g.is_sparse or torch.is_complex(p):
            return None
        state = optimizer.state[p]
        if len(state) == 0:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        params.append(p)
        grads.append(g)
        avgs.append(state["exp_avg"])
        sqs.append(state["exp_avg_sq"])
        steps.append(state["step"])
    return params, grads, avgs, sqs, steps


@torch.no_grad()
def adam_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()`` (see the module docstring): for a plain fused Adam on CPU tensors, one direct
    ``torch._fused_adam_`` call per group (steps counted first, as torch does); otherwise the optimiser's own."""
    if not plain_fused_adam(optimizer):
        optimizer.step()
        return
    groups = [(group, group_tensors(optimizer, group)) for group in optimizer.param_groups]
    if any(tensors is None for _, tensors in groups):
        optimizer.step()
        return
    for group, (params, grads, avgs, sqs, steps) in groups:
        if not params:
            continue
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        FUSED_ADAM(params, grads, avgs, sqs, [], steps, lr=group["lr"], beta1=beta1, beta2=beta2,
                   weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False,
                   maximize=group["maximize"], grad_scale=None, found_inf=None)
