#!/usr/bin/python3
"""evoq evaluator: train a small PyTorch network on the scikit-learn digits.

One-shot mode (evoq --eval-cmd): read one design as JSON on stdin, print one
result line. Persistent mode (evoq --eval-cmd ... --persistent, which sets
EVOQ_PERSISTENT=1): read one design per line, print one result line per
design, import PyTorch once.

Result lines: {"fitness": <validation accuracy>, "metrics": {...}} or
{"infeasible": "<reason>"}. Anything else printed is the evaluator's log.
The GPU, if any, is the one evoq gives the slot through CUDA_VISIBLE_DEVICES.
"""
import hashlib
import json
import math
import os
import sys
import time

import torch
from sklearn.datasets import load_digits

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
    layers, width = [], 64
    for item in genome["layers"]:
        units = int(item["units"])
        layers += [torch.nn.Linear(width, units), ACTIVATIONS[item["activation"]]()]
        if float(item.get("dropout", 0)) > 0:
            layers.append(torch.nn.Dropout(float(item["dropout"])))
        width = units
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def seed_of(design):
    return int(hashlib.sha256(design["id"].encode()).hexdigest()[:8], 16)


def evaluate(design, data, device):
    genome = design["genome"]
    model = build(genome)
    params = sum(p.numel() for p in model.parameters())
    if params > MAX_PARAMS:
        return {"infeasible": f"{params} parameters exceed the limit of {MAX_PARAMS}"}
    torch.manual_seed(seed_of(design))
    model = build(genome).to(device)
    xtr, ytr, xva, yva = data
    opt_cls = torch.optim.Adam if genome["optimizer"] == "adam" else torch.optim.SGD
    kwargs = {"lr": float(genome["lr"])}
    if genome["optimizer"] == "sgd":
        kwargs["momentum"] = 0.9
    opt = opt_cls(model.parameters(), **kwargs)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch, start = int(genome["batch"]), time.time()
    for _ in range(int(genome["epochs"])):
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
    if not math.isfinite(acc) or not math.isfinite(last_loss):
        return {"infeasible": "training diverged"}
    return {"fitness": acc, "metrics": {"params": params, "train_s": round(time.time() - start, 3),
                                        "device": str(device), "loss": round(last_loss, 4)}}


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # evoq runs one evaluation per slot in parallel
    data = load_data(device)
    persistent = os.environ.get("EVOQ_PERSISTENT") == "1" or "--persistent" in sys.argv
    lines = sys.stdin if persistent else [sys.stdin.read()]
    for line in lines:
        if not line.strip():
            continue
        design = json.loads(line)
        try:
            out = evaluate(design, data, device)
        except (KeyError, ValueError, TypeError) as e:
            out = {"error": f"bad design: {e!r}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
