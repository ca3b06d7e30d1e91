"""The train20 workload's training: a PyTorch MLP on a generated 20-class,
64-feature classification task with noisy labels, EPOCHS epochs, the
validation accuracy after every epoch.

As evoq's persistent evaluator:

    python3 train20.py HELPER_DIR [EPOCHS]

serves designs through the evoq_eval helper (HELPER_DIR holds
evoq_eval.py and evoq_torch.py): it reports every epoch's validation
accuracy, marks the last epoch's report, stops when the early-stopping
rule says so, saves the network's state_dict as the design's checkpoint
and, with --inherit, starts a mutant from its parent's.

The Optuna baselines (train20_baseline.py) import this file and call
train() with a callback of their own in place of evoq_eval.report, so that
both sides train the same networks on the same data, epoch for epoch.

The data are fixed (DATA_SEED): 3,000 points of sklearn's
make_classification, 20 classes of 2 clusters each in 64 features (24
informative), 20% of the labels replaced at random; 2,000 to train on,
1,000 to validate on. With labels that noisy, wide nets at a high learning
rate lead in the first epochs and then fit the noise, while smaller or
more regularized nets keep climbing: the learning curves cross, so an
early epoch's ranking is not the last one's.
"""
import collections
import hashlib
import math
import os
import sys
import time

EPOCHS = 30  # the serve and baseline command lines may set fewer (the smoke run)
DATA_SEED = 20
TRAIN, VALID = 2000, 1000
FEATURES, CLASSES = 64, 20

_data = None


def data():
    """The train and validation tensors, made once per process."""
    global _data
    if _data is None:
        import torch
        from sklearn.datasets import make_classification
        x, y = make_classification(n_samples=TRAIN + VALID, n_features=FEATURES, n_informative=24, n_redundant=8,
                                   n_classes=CLASSES, n_clusters_per_class=1, class_sep=2.0, flip_y=0.2,
                                   random_state=DATA_SEED)
        x = torch.tensor(x, dtype=torch.float32)
        y = torch.tensor(y, dtype=torch.long)
        mean, std = x[:TRAIN].mean(0), x[:TRAIN].std(0) + 1e-6
        x = (x - mean) / std
        _data = (x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:])
    return _data


def build(genome):
    """The network a genome describes: depth hidden layers of width units.
    Layers are named, not numbered, so that inheritance matches them by
    name across mutations (a dropout switched on would renumber a plain
    Sequential)."""
    import torch
    layers, width = [], FEATURES
    units = int(genome["width"])
    for i in range(int(genome["depth"])):
        layers += [(f"hidden{i}", torch.nn.Linear(width, units)), (f"act{i}", torch.nn.ReLU())]
        if float(genome["dropout"]) > 0:
            layers.append((f"drop{i}", torch.nn.Dropout(float(genome["dropout"]))))
        width = units
    layers.append(("out", torch.nn.Linear(width, CLASSES)))
    return torch.nn.Sequential(collections.OrderedDict(layers))


def seed_of(key):
    """A torch seed drawn from a design's id: the same design trains the
    same way twice."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def train(genome, seed, report, start=None, epochs=EPOCHS):
    """Train genome's network for epochs epochs, calling report(epoch, acc,
    last) after each and ending early when it returns False. start, if
    given, is called with the fresh model (to inherit weights) before the
    training. Returns (accuracy, epochs trained, metrics, model)."""
    import torch
    torch.manual_seed(seed)
    model = build(genome)
    if start is not None:
        start(model)
    xtr, ytr, xva, yva = data()
    opt = torch.optim.Adam(model.parameters(), lr=float(genome["lr"]), weight_decay=float(genome["weight_decay"]))
    loss_fn = torch.nn.CrossEntropyLoss()
    batch, began = int(genome["batch"]), time.time()
    acc, epoch, loss = 0.0, 0, None
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(TRAIN)
        for i in range(0, TRAIN, batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xva).argmax(1) == yva).float().mean().item()
        if not math.isfinite(loss.item()):
            acc = 1.0 / CLASSES  # diverged: what guessing scores, and it stays there
        if not report(epoch, acc, epoch == epochs):
            break
    params = sum(p.numel() for p in model.parameters())
    return acc, epoch, {"params": params, "train_s": round(time.time() - began, 3)}, model


def serve(helper, epochs):
    """Serve evoq's designs through the evoq_eval helper in helper, each
    trained for epochs epochs."""
    sys.dont_write_bytecode = True  # no __pycache__ beside the helper, in the source tree
    sys.path.insert(0, helper)
    import torch
    import evoq_eval
    import evoq_torch
    torch.set_num_threads(1)  # one evaluation per slot, one core each
    data()

    def evaluate(design):
        def start(model):
            # Without the check, every design without a parent would
            # report inherited false.
            if evoq_eval.parent_checkpoint():
                evoq_torch.start_from_parent(model)

        acc, trained, metrics, model = train(design["genome"], seed_of(design["id"]),
                                            lambda e, a, last: evoq_eval.report(e, a, last=last), start, epochs)
        evoq_torch.save_model(model)  # False, saving nothing, when the run stores no checkpoints
        metrics["epochs"] = trained
        return acc, metrics

    evoq_eval.main(evaluate)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or not os.path.isfile(os.path.join(sys.argv[1], "evoq_eval.py")):
        sys.exit("usage: train20.py HELPER_DIR [EPOCHS] (HELPER_DIR: the directory of evoq_eval.py and evoq_torch.py)")
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else EPOCHS)
