#!/usr/bin/python3
"""evoq evaluator: train a small PyTorch network on the scikit-learn digits.

It speaks evoq's evaluator protocol through python/evoq_eval.py, in both
modes: one-shot (evoq --eval-cmd: one design as JSON on stdin) and
persistent (--persistent, which sets EVOQ_PERSISTENT=1: one design per
line, PyTorch imported once per slot).

After every epoch it reports the validation accuracy, with the epoch
(counted from 1) as the step and the last batch's training loss as a
metric: {"report": {"step": 3, "fitness": 0.91, "metrics": {"loss": 0.2}}};
the last epoch's report carries "last": true, so that evoq's early-stopping
rule never stops a design at its own last epoch.
When evoq's early-stopping rule stops the design, report() returns False
and the training ends there. The result is {"fitness": <validation
accuracy>, "metrics": {"params", "train_s", "device", "loss"}}, or
{"infeasible": "<reason>"} for a network over MAX_PARAMS parameters or a
training that diverged. Anything else printed is the evaluator's log.
The GPU, if any, is the one evoq gives the slot through CUDA_VISIBLE_DEVICES.

Checkpoints: at the end of its training (finished or stopped) it saves the
network's state_dict wherever evoq says (EVOQ_CHECKPOINT_OUT, or the design
line's "checkpoint_out"). With --inherit, a mutant given its parent's
checkpoint starts from the parent's weights for every layer of the same
name and shape, and from its own initialization for the layers its
mutation added or resized; it still trains the epochs its genome says, so
inheritance shows as a better accuracy for the same training. Its metrics
then carry inherited, inherited_params (and inherit_reason when it could
not inherit).
"""
import collections
import hashlib
import math
import os
import sys
import time

import torch
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import evoq_eval  # noqa: E402  (found through the path above)
import evoq_torch  # noqa: E402

MAX_PARAMS = 60_000  # larger designs are reported infeasible before training
ACTIVATIONS = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}


TRAIN = 400  # a small training set: the search has to find designs that learn fast


def load_data(device):
    """The 1,797 8x8 digits, standardized; TRAIN examples to train on and
    the last 20% to validate on, split with a fixed seed."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g)
    x, y = x[perm], y[perm]
    cut = int(0.8 * len(x))
    mean, std = x[:TRAIN].mean(0), x[:TRAIN].std(0) + 1e-6
    x = (x - mean) / std
    return [t.to(device) for t in (x[:TRAIN], y[:TRAIN], x[cut:], y[cut:])]


def build(genome):
    """The network a genome describes."""
    # Named, not numbered, layers: inheritance matches tensors by name, and
    # in a plain Sequential a dropout turned on or off would renumber every
    # layer after it, so that a child would inherit none of them.
    layers, width = [], 64
    for i, item in enumerate(genome["layers"]):
        units = int(item["units"])
        layers += [(f"hidden{i}", torch.nn.Linear(width, units)), (f"act{i}", ACTIVATIONS[item["activation"]]())]
        if float(item.get("dropout", 0)) > 0:
            layers.append((f"drop{i}", torch.nn.Dropout(float(item["dropout"]))))
        width = units
    layers.append(("out", torch.nn.Linear(width, 10)))
    return torch.nn.Sequential(collections.OrderedDict(layers))


def seed_of(design):
    return int(hashlib.sha256(design["id"].encode()).hexdigest()[:8], 16)


def evaluate(design, data, device):
    """Train the design's network, reporting after every epoch; its
    accuracy and metrics, or evoq_eval.Infeasible."""
    genome = design["genome"]
    model = build(genome)
    params = sum(p.numel() for p in model.parameters())
    if params > MAX_PARAMS:
        raise evoq_eval.Infeasible(f"{params} parameters exceed the limit of {MAX_PARAMS}")
    torch.manual_seed(seed_of(design))
    model = build(genome).to(device)
    if evoq_eval.parent_checkpoint():
        # Without the check, every design without a parent (random ones,
        # runs without --inherit) would report inherited false.
        evoq_torch.start_from_parent(model)
    xtr, ytr, xva, yva = data
    opt_cls = torch.optim.Adam if genome["optimizer"] == "adam" else torch.optim.SGD
    kwargs = {"lr": float(genome["lr"])}
    if genome["optimizer"] == "sgd":
        kwargs["momentum"] = 0.9
    # A fresh optimizer: the mutant may have changed it or its learning rate.
    opt = opt_cls(model.parameters(), **kwargs)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch, start = int(genome["batch"]), time.time()
    epochs = int(genome["epochs"])
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(xtr), device=device)
        for i in range(0, len(xtr), batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        last_loss = float(loss.item())
        # Checked every epoch: once the weights are NaN they stay NaN, and
        # the early-stopping rule should not rank a diverged curve.
        if not math.isfinite(acc) or not math.isfinite(last_loss):
            raise evoq_eval.Infeasible("training diverged")
        # The last epoch's report says so: a design that trained all its
        # epochs is never stopped at a rung that falls on its last one.
        if not evoq_eval.report(epoch, acc, last=epoch == epochs, loss=round(last_loss, 4)):
            break  # stopped: evoq keeps the last report; the result line is the helper's
    evoq_torch.save_model(model)  # False, saving nothing, when the run stores no checkpoints
    return acc, {"params": params, "train_s": round(time.time() - start, 3),
                 "device": str(device), "loss": round(last_loss, 4)}


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # evoq runs one evaluation per slot in parallel
    data = load_data(device)
    evoq_eval.main(lambda design: evaluate(design, data, device))


if __name__ == "__main__":
    main()
