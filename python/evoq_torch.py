"""evoq_torch: weight inheritance for PyTorch evaluators of evoq.

With --inherit, evoq hands each mutant its parent's checkpoint. A mutant
differs from its parent in a few genes, so most of its layers have the
parent's names and shapes: it starts from the parent's weights for those,
from its own initialization for the layers the mutation added or resized.

    model = build(genome)                      # initialized as usual
    evoq_torch.start_from_parent(model)        # parent's weights where they fit
    ...train, report...
    evoq_torch.save_model(model)               # this design's checkpoint

Progress, so that an interrupted design resumes where it was:

    step = evoq_torch.resume(model, optimizer)      # 0: from scratch
    for epoch in range(step + 1, epochs + 1):
        ...train one epoch...
        evoq_torch.save_progress(epoch, model, optimizer)
        if not evoq_eval.report(epoch, acc):
            break

start_from_parent(model) is evoq_eval.load_parent() then inherit(model,
state); both record inherited, inherit_reason and inherited_params in the
design's result metrics, and neither raises because of the parent's file.
Needs torch; evoq_eval (beside this file) does not.
"""
from collections.abc import Mapping

import torch

import evoq_eval


def inherit(model, state):
    """Copy into model every tensor of state whose name and shape match one
    of model.state_dict(); return how many elements were copied.

    state is a state_dict, or a dict holding one under "model" (a training
    checkpoint with optimizer state beside it). Unmatched layers keep their
    initialization; values are cast to the model's dtype and device. Records
    inherited_params, and inherited True when anything was copied, else
    inherited False with the reason. state None (load_parent() found
    nothing; it recorded why) copies nothing and records nothing."""
    if state is None:
        return 0
    if isinstance(state, Mapping) and isinstance(state.get("model"), Mapping):
        state = state["model"]
    if not isinstance(state, Mapping):
        evoq_eval.record_inheritance(False, f"parent checkpoint holds a {type(state).__name__}, not a state_dict",
                                     params=0)
        return 0
    own = model.state_dict()
    # The name says which layer a tensor belongs to, the shape whether the
    # mutation resized it: a resized layer keeps its fresh initialization
    # rather than a slice of the parent's, which would not train like one.
    take = {k: v for k, v in state.items()
            if isinstance(v, torch.Tensor) and k in own and own[k].shape == v.shape}
    if not take:
        evoq_eval.record_inheritance(False, "no parameter matched in name and shape", params=0)
        return 0
    try:
        model.load_state_dict(take, strict=False)
    except Exception as e:
        # Rare with names and shapes checked (a module's own loading hook
        # refusing): the model may hold some of the parent's tensors, but
        # the result must not claim it inherited.
        evoq_eval.record_inheritance(False, "parent checkpoint unusable: " + evoq_eval._clip(f"{type(e).__name__}: {e}"),
                                     params=0)
        return 0
    n = sum(v.numel() for v in take.values())
    evoq_eval.record_inheritance(True, params=n)
    return n


def start_from_parent(model, map_location="cpu"):
    """inherit(model, evoq_eval.load_parent(map_location)): the number of
    elements copied from the parent's checkpoint, 0 when there is none or
    it does not load (the result's metrics say why)."""
    return inherit(model, evoq_eval.load_parent(map_location))


def save_model(model):
    """evoq_eval.save(model.state_dict()): True, or False when the run
    stores no checkpoints."""
    return evoq_eval.save(model.state_dict())


def save_progress(step, model, optimizer=None):
    """Save the model's and the optimizer's state as the design's progress
    after step steps (evoq_eval.save_progress): True, or False when the run
    keeps none."""
    state = {"model": model.state_dict()}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    return evoq_eval.save_progress(step, state)


def resume(model, optimizer=None, map_location="cpu"):
    """Load the design's last saved progress into model (and optimizer) and
    return its step, the step to continue after; 0 when there is none or it
    does not load (the result's metrics then say why, progress_unusable,
    and the model keeps its initialization). Call it after start_from_parent:
    a resumed design's own weights win over its parent's."""
    got = evoq_eval.resume_progress(map_location)
    if got is None:
        return 0
    step, state = got
    try:
        if not isinstance(state, Mapping) or not isinstance(state.get("model"), Mapping):
            raise TypeError(f"progress holds a {type(state).__name__}, not a dict with a model state_dict")
        own = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            model.load_state_dict(state["model"])
            if optimizer is not None and state.get("optimizer") is not None:
                optimizer.load_state_dict(state["optimizer"])
        except Exception:
            model.load_state_dict(own)  # from scratch means the model's own initialization
            raise
    except Exception as e:
        evoq_eval.record_progress_unusable(evoq_eval._clip(f"{type(e).__name__}: {e}"))
        return 0
    return step
