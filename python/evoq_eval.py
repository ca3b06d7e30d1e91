"""evoq_eval: the evaluator side of evoq's line protocol, for Python evaluators.

Write train_fn(design), which trains, calls report(step, fitness, **metrics)
as it goes, stops when report() returns False, and returns the fitness (or
(fitness, metrics)); then call main(train_fn). See README.md.

The protocol, which this module speaks for you:

One-shot (evoq starts the command once per design): stdin holds the design
as one JSON object. stdout may carry report lines {"report": {"step": n,
"fitness": x, "metrics": {...}}}, steps increasing, the last one with
"last": true; its last non-blank line is the result, {"fitness": x,
"metrics": {...}} or {"infeasible": "why"}; a non-zero exit is an error. To
stop a design the worker sends SIGTERM to the process group, then SIGKILL
after its --stop-grace: report() then returns False so that the training
can end cleanly. A report marked last is never stopped at: report(...,
last=True) marks it, and when train_fn returns without report() having
returned False, this module repeats its last report marked last before the
result (a SIGTERM that came after that report then changes nothing).

Persistent (--persistent sets EVOQ_PERSISTENT=1): one design per stdin
line, with "attempt". Per design: report lines, then exactly one result
line, which may also be {"error": "why"}, and which echoes the design
line's "id": a result line that names another design, or that comes when
no design is outstanding (a second line after the result), is a protocol
error: the design being served ends as an error and the worker restarts
the process. The worker answers each report
line with one stdin line, {"continue": true} or {"continue": false,
"reason": "..."}; after false the design ends at once with a result line
(the worker records the last report's fitness). EOF between designs ends
the process.

Anything else on stdout is the evaluator's log: print freely. NaN or
infinite metrics are sent as null; a NaN or infinite fitness is refused
with ValueError (an error result). Call report() from one thread.

Outside evoq (no design read, not serving, no EVOQ_DESIGN_ID: a notebook,
an Optuna objective, a baseline script calling train_fn directly),
report() checks its arguments as it would under evoq, prints nothing and
returns True, for any number of designs in one process.

Checkpoints. A run that stores checkpoints names, per design, a file the
evaluator may write the design's checkpoint to (one-shot:
EVOQ_CHECKPOINT_OUT; persistent: the design line's "checkpoint_out"); the
worker stores whatever that file holds when the evaluation ends, whatever
its status. A mutant of a run with --inherit also gets its parent's
checkpoint to read (EVOQ_PARENT_CHECKPOINT, "parent_checkpoint"); each is
absent when there is none. checkpoint_out() and parent_checkpoint() return
these paths or None; save(obj) writes the checkpoint; load_parent() reads
the parent's and never raises: a missing, corrupt or unloadable file is
None, and the result says why. The result's metrics then carry inherited
(the design started from its parent's weights), inherit_reason (why not)
and inherited_params (how many parameters came from the parent, set by
evoq_torch.inherit or record_inheritance); train_fn's own metrics of the
same names win. In persistent mode all of this is per design.

Progress. A run that stores checkpoints also keeps each design's progress
while it trains, so that an interrupted design (its worker killed, handed
back at the walltime or on a drain, a controller restarted) resumes where
it was rather than from scratch. save_progress(step, obj) writes obj as the
design's progress after step steps (one-shot: the file EVOQ_PROGRESS_OUT;
persistent: the design line's "progress_out") and prints {"progress":
{"step": step}}: the worker stores it, the newest replacing the one before.
resume_progress() is (step, obj) of the progress the design's earlier
attempt saved last (EVOQ_PROGRESS_IN and EVOQ_RESUME_STEP; "progress_in"
and "resume_step"), or None: none, or unreadable, in which case the result
says why (metrics.progress_unusable) and the design trains from scratch.
Report steps after a resume continue from its step. progress_requested()
is True once the worker asked for a save now (it is about to hand the
design back): an evaluator that saves every few steps saves at once.

Checkpoint files: with torch imported, save() uses torch.save and
load_parent() torch.load(weights_only=True); without, pickle, read back by
an unpickler that builds plain data only (containers, numbers, strings,
bytes, numpy arrays). Either way a crafted file cannot run code in the
evaluator that reads it.
"""
import collections
import json
import math
import numbers
import os
import pickle
import signal
import sys
import traceback


class Infeasible(Exception):
    """Raise from train_fn when the design cannot be evaluated (too large,
    say): its result is {"infeasible": str(exc)}, not an error."""


Env = collections.namedtuple("Env", "run design_id attempt slot worker gpu persistent")


class _Stdout:
    """Stands in for sys.stdout and remembers whether the user's output
    stopped mid-line: a report glued to the end of a log line would read as
    log, and in persistent mode the worker would never answer it."""

    def __init__(self, stream):
        self.stream, self.midline = stream, False

    def write(self, s):
        if s:
            self.midline = not s.endswith("\n")
        return self.stream.write(s)

    def __getattr__(self, name):
        return getattr(self.stream, name)


# Protocol lines go to the process's real stdout, whatever the user's code
# does to sys.stdout later. A sys.stdout someone already replaced (a
# notebook, a test runner) is left alone.
_OUT, _proxy = sys.__stdout__, None
if _OUT is not None and sys.stdout is _OUT:
    _proxy = sys.stdout = _Stdout(_OUT)


class _State:
    design = None        # the design being evaluated
    serving = False      # inside serve(): persistent mode
    last_step = None     # this design's last reported step and fitness
    last_fitness = None
    stopped = False      # this design is to stop now
    told_stop = False    # report() returned False to this design's train_fn
    last_body = None     # this design's last report, and whether it was marked last
    marked_last = False
    term_handler = False
    inherit = {}         # this design's inherited, inherit_reason, inherited_params
    resumed = {}         # the same, as the attempt it resumed from recorded them


_s = _State()


def design():
    """The current design: in one-shot mode read from stdin once."""
    if _s.design is None:
        _oneshot_only("design()")
        text = _stdin().read()
        if not text.strip():
            raise ValueError("no design on stdin: evoq writes one as JSON; to try the evaluator by hand, "
                             "pipe one in: echo '{\"id\": \"r-1\", \"genome\": {...}}' | python3 evaluate.py")
        _s.design = _parse_design(text)
    return _s.design


def genome():
    """The current design's genome."""
    return design()["genome"]


def stopped():
    """Whether the current design is to stop (report() returned False)."""
    return _s.stopped


def report(step, fitness, *, last=False, **metrics):
    """Report fitness after step steps of training; False means stop now.

    last=True says the training ends with this report (the design's last
    epoch): evoq's early-stopping rule records it and never stops the
    design there. In one-shot mode the helper says so for you when
    train_fn returns; in persistent mode pass it (or run with
    --max-step-gene), or a design whose last report falls on a rung may be
    stopped there. In persistent mode this waits for the worker's answer;
    in one-shot mode it never blocks and returns False once SIGTERM has
    come. A metric cannot be named last. Outside evoq
    (a notebook, a baseline) it checks its arguments and returns True."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"report step must be an int >= 0, got {step!r}")
    step = int(step)
    if not _active():
        # Outside evoq nothing tells one design from the next: check the
        # values, so that a mistake shows before a run, and go on.
        _finite(fitness, f"report fitness at step {step}")
        _clean(metrics)
        return True
    if _s.marked_last:
        raise ValueError(f"report at step {step} after the last one, at step {_s.last_step}")
    if _s.last_step is not None and step <= _s.last_step:
        raise ValueError(f"report step {step} does not follow step {_s.last_step}: "
                         "steps must increase within a design (count epochs from 1, say)")
    body = {"step": step, "fitness": _finite(fitness, f"report fitness at step {step}")}
    if metrics:
        body["metrics"] = _clean(metrics)
    if last:
        body["last"] = True
    if not _s.serving:
        _oneshot_only("report()")
        _on_sigterm()
    if _s.stopped:
        _s.told_stop = True
        return False
    _emit({"report": body})
    _s.last_step, _s.last_fitness, _s.last_body, _s.marked_last = step, body["fitness"], body, bool(last)
    if not _s.serving:
        # A SIGTERM that came once the line was out is this report's stop
        # (or none): train_fn learns it at its next report. Told now, a
        # train_fn at its last epoch could not tell "stop" from "done".
        return True
    go = _answer()
    _s.told_stop = not go
    return go


def serve(train_fn):
    """Persistent mode: evaluate one design per stdin line until EOF."""
    _s.serving = True
    try:
        while True:
            line = _readline()
            if not line:
                return
            try:
                d = _parse_design(line)
            except ValueError as e:
                _emit({"error": f"bad design line: {e}"})
                continue
            _s.design, _s.last_step, _s.last_fitness, _s.stopped, _s.inherit, _s.resumed = d, None, None, False, {}, {}
            try:
                out = _outcome(train_fn, d)
            except Exception as e:
                traceback.print_exc()
                sys.stderr.flush()
                out = _stopped_result() or {"error": f"{type(e).__name__}: {e}"}
            if "id" in d:  # ties the result to its design: the worker refuses a line of another
                out = {"id": d["id"], **out}
            _emit(out)
            _s.design = None
    finally:
        _s.serving = False


def run(train_fn):
    """One-shot mode: evaluate the design on stdin and print its result.
    Exceptions other than Infeasible propagate (exit code 1)."""
    _oneshot_only("run()")
    _emit(_outcome(train_fn, design()))


def main(train_fn):
    """serve(train_fn) when evoq started us with --persistent, else run(train_fn)."""
    (serve if os.environ.get("EVOQ_PERSISTENT") == "1" else run)(train_fn)


def env():
    """Where this evaluation runs; None for what is not set."""
    get = lambda name: os.environ.get(name) or None
    num = lambda v: int(v) if v not in (None, "") else None
    persistent = _persistent()
    if persistent:  # one process serves many designs: the design line says which
        d = _s.design or {}
        design_id, attempt = d.get("id"), d.get("attempt")
    else:
        design_id, attempt = get("EVOQ_DESIGN_ID"), num(get("EVOQ_ATTEMPT"))
    return Env(get("EVOQ_RUN"), design_id, attempt, num(get("EVOQ_SLOT")), get("EVOQ_WORKER"),
               get("EVOQ_GPU"), persistent)


def checkpoint_out():
    """The file to write the current design's checkpoint to (save() does),
    or None when the run stores no checkpoints."""
    return _checkpoint_path("checkpoint_out", "EVOQ_CHECKPOINT_OUT")


def parent_checkpoint():
    """The file holding the checkpoint of the current design's parent, to
    read only (load_parent() does), or None when it has none to start from."""
    return _checkpoint_path("parent_checkpoint", "EVOQ_PARENT_CHECKPOINT")


def save(obj):
    """Write obj as the current design's checkpoint and return True, or
    return False when the run stores no checkpoints.

    With torch imported this is torch.save, else pickle. Saving again
    replaces the checkpoint; an OSError (a full disk) propagates."""
    path = checkpoint_out()
    if path is None:
        return False
    _write(path, obj)
    return True


def _write(path, obj):
    # Written beside the out path and renamed over it: a SIGKILL after
    # --stop-grace, mid-write, leaves the previous save whole, and the
    # worker never stores half a file.
    tmp = f"{path}.{os.getpid()}.partial"
    try:
        with open(tmp, "wb") as f:
            torch = sys.modules.get("torch")  # tensors mean torch is imported; never import it for a dict
            if torch is not None:
                torch.save(obj, f)
            else:
                pickle.dump(obj, f, protocol=4)  # 4: readable by every Python evoq_eval runs on
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_progress(step, obj):
    """Save obj as the current design's progress after step steps and tell
    the worker, which stores it (the newest save replaces the one before);
    return False when the run keeps none. Save before report(step, ...):
    an attempt that resumes at step reports only the steps after it.

    Written as save() writes a checkpoint (torch.save with torch imported,
    else pickle), under another name and renamed into place."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"progress step must be an int >= 0, got {step!r}")
    path = _checkpoint_path("progress_out", "EVOQ_PROGRESS_OUT")
    if path is None:
        return False
    # What the design's start recorded of its inheritance goes with it: a
    # resumed attempt is handed no parent's checkpoint, and its result
    # says what the first attempt's would have.
    _write(path, {_PROGRESS_KEY: {"inherit": {**_s.inherit, **_s.resumed}}, "progress": obj})
    _emit({"progress": {"step": int(step)}})
    return True


def resume_progress(map_location="cpu"):
    """(step, obj) of the progress this design saved last, in an earlier
    attempt, or None when there is none; never raises. A file that does not
    load (another version of the model code, say) is None, the design
    trains from scratch, and its result's metrics say why
    (progress_unusable)."""
    path = _checkpoint_path("progress_in", "EVOQ_PROGRESS_IN")
    if path is None:
        return None
    if _persistent():
        step = (_s.design or {}).get("resume_step")
    else:
        step = os.environ.get("EVOQ_RESUME_STEP")
    try:
        step = int(step)
        saved = _load(path, map_location)
        if not isinstance(saved, dict) or not isinstance(saved.get(_PROGRESS_KEY), dict) or "progress" not in saved:
            raise ValueError("not a progress file save_progress() wrote")
    except Exception as e:
        record_progress_unusable(_clip(f"{type(e).__name__}: {e}"))
        return None
    _s.resumed = {k: v for k, v in saved[_PROGRESS_KEY].get("inherit", {}).items()
                  if k in ("inherited", "inherit_reason", "inherited_params")}
    return step, saved["progress"]


# The key of save_progress()'s own record in a progress file.
_PROGRESS_KEY = "evoq_eval"


def record_progress_unusable(reason):
    """Record in the current design's result that it could not use the
    progress it was handed and trained from scratch (metrics
    progress_unusable); resume_progress() and evoq_torch.resume() call it."""
    print(f"evoq_eval: saved progress unusable: {reason}; training from scratch", file=sys.stderr, flush=True)
    _s.inherit = {**_s.inherit, "progress_unusable": str(reason)}


def progress_requested():
    """Whether the worker asked for a save now: it is about to hand the
    design back (its walltime, a drain) and waits a little for one."""
    path = _checkpoint_path("progress_request", "EVOQ_PROGRESS_REQUEST")
    return path is not None and os.path.exists(path)


def load_parent(map_location="cpu"):
    """The object in the parent's checkpoint, or None; never raises.

    Records for the result: inherited True when the checkpoint loads (what
    evoq_torch.inherit then finds may still say False), else inherited
    False with inherit_reason "no parent checkpoint" or "parent checkpoint
    unreadable: <exception>". map_location goes to torch.load: the default
    loads tensors saved on a GPU on a machine without one."""
    path = parent_checkpoint()
    if path is None:
        record_inheritance(False, "no parent checkpoint")
        return None
    try:
        obj = _load(path, map_location)
    except Exception as e:
        # Checked for size and digest by the worker, but it may still come
        # from another version of the model code: the design trains from
        # scratch rather than failing.
        reason = "parent checkpoint unreadable: " + _clip(f"{type(e).__name__}: {e}")
        print(f"evoq_eval: {reason}; training from scratch", file=sys.stderr, flush=True)
        record_inheritance(False, reason)
        return None
    record_inheritance(True)
    return obj


def record_inheritance(inherited, reason=None, params=None):
    """Record in the current design's result metrics whether it started
    from its parent's checkpoint: inherited, inherit_reason (why not; only
    with inherited False) and, when params is given, inherited_params.
    load_parent() and evoq_torch call it; call it when you copy weights
    some other way. Metrics of the same names that train_fn returns win."""
    m = dict(_s.inherit)
    m["inherited"] = bool(inherited)
    if not inherited and reason:
        m["inherit_reason"] = str(reason)
    else:
        m.pop("inherit_reason", None)
    if params is not None:
        m["inherited_params"] = int(params)
    _s.inherit = m


def _checkpoint_path(field, var):
    if _persistent():
        # One process serves many designs: the path is the design line's,
        # and an EVOQ_ variable in the process's environment is stale.
        return (_s.design or {}).get(field) or None
    return os.environ.get(var) or None


# torch.save has written zip archives since PyTorch 1.6; anything else is
# read as save()'s own pickle.
_ZIP_MAGIC = b"PK\x03\x04"


def _load(path, map_location):
    with open(path, "rb") as f:
        if f.read(4) == _ZIP_MAGIC:
            f.seek(0)
            try:
                import torch  # imported only for a file that needs it: it costs seconds
            except ImportError as e:
                raise RuntimeError(f"saved by torch.save, and torch does not import here: {e}") from None
            # weights_only: tensors and plain containers, no code from the file.
            try:
                return torch.load(f, map_location=map_location, weights_only=True)
            except pickle.UnpicklingError as e:
                # Older torch (1.13, Debian's) knows too few of pickle's
                # operations for weights_only: an optimizer's state, with
                # its floats, does not load. The same rule, kept by our own
                # unpickler: plain data and torch's tensor rebuilders only.
                if "Unsupported operand" not in str(e):
                    raise
                f.seek(0)
                return torch.load(f, map_location=map_location, pickle_module=_torch_pickle, weights_only=False)
        f.seek(0)
        obj = _PlainUnpickler(f).load()
        if f.read(1):  # torch.save's legacy format is several pickles in a row
            raise pickle.UnpicklingError("data after the first pickle: not a file save() wrote")
        return obj


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only, as torch.load(weights_only=True) does for
    tensors: a checkpoint written by another worker must not be able to run
    code here, so no class outside this list is looked up."""

    ALLOWED = {("builtins", n) for n in ("bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset",
                                         "int", "list", "range", "set", "slice", "str", "tuple")} \
        | {("collections", n) for n in ("OrderedDict", "defaultdict", "deque")} \
        | {("numpy", "ndarray"), ("numpy", "dtype")} \
        | {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data: without torch a checkpoint holds "
                                     "containers, numbers, strings, bytes and numpy arrays")


class _TensorUnpickler(_PlainUnpickler):
    """_PlainUnpickler, with the functions torch.save's pickles rebuild
    tensors with; torch.load itself resolves the storages."""

    TORCH = {("torch._utils", n) for n in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter",
                                           "_rebuild_parameter_with_state")} \
        | {("torch", n) for n in ("Size", "device", "dtype")}

    def find_class(self, module, name):
        if (module, name) in self.TORCH:
            return pickle.Unpickler.find_class(self, module, name)
        return super().find_class(module, name)


class _torch_pickle:
    """The pickle module torch.load is given when its own weights_only
    cannot read a file (older torch)."""
    Unpickler = _TensorUnpickler
    load = staticmethod(pickle.load)
    __name__ = "evoq_eval._torch_pickle"


def _clip(text, n=240):
    """text on one line and at most about n characters, keeping both ends:
    torch's weights_only errors put the cause last."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 105] + " ... " + text[-100:]


def _outcome(train_fn, d):
    """The result line for train_fn(d); exceptions other than Infeasible propagate."""
    _s.told_stop, _s.last_body, _s.marked_last = False, None, False
    try:
        value = train_fn(d)
    except Infeasible as e:
        value = e
    was_stopped = _s.told_stop and _s.last_fitness is not None  # else a SIGTERM before any report: no stop
    if isinstance(value, Infeasible):
        return _stopped_result() if was_stopped else {"infeasible": str(value) or "infeasible"}
    if isinstance(value, dict):
        if "fitness" not in value:
            raise ValueError(f"train_fn returned a dict without \"fitness\": {value!r}; "
                             "raise evoq_eval.Infeasible(reason) for an infeasible design")
        fitness, metrics = value["fitness"], value.get("metrics")
    elif isinstance(value, tuple) and len(value) == 2:
        fitness, metrics = value
    else:
        fitness, metrics = value, None
    metrics = {**_s.inherit, **_s.resumed, **(dict(metrics) if metrics else {})}
    if was_stopped:
        # The worker records the last report's fitness; the metrics go
        # with it (whether the design inherited, say).
        return _stopped_result(metrics)
    out = {"fitness": _finite(fitness, "train_fn's fitness")}
    if metrics:
        out["metrics"] = _clean(metrics)
    _mark_end()  # once the result is sure to follow
    return out


def _mark_end():
    """One-shot: train_fn returned without being told to stop, so its last
    report was its last. Say so before the result: a stop decided at that
    report may reach the process now (a SIGTERM that train_fn never saw),
    and the design, which trained to its end, keeps its result. Persistent
    mode needs none: report() waited for its answer there."""
    if _s.serving or _s.last_body is None or _s.marked_last:
        return
    _emit({"report": {**_s.last_body, "last": True}})
    _s.marked_last = True


def _stopped_result(metrics=None):
    if _s.stopped and _s.last_fitness is not None:
        return {"fitness": _s.last_fitness, "metrics": _clean({**_s.inherit, **_s.resumed, **(metrics or {}), "stopped": True})}
    return None


def _answer():
    """Read the worker's answer to the report just printed."""
    line = _readline()
    if not line:  # the worker is going away: end this design; serve() then meets EOF too
        _s.stopped = True
        return False
    try:
        go = json.loads(line)["continue"]
        if not isinstance(go, bool):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(f"want {{\"continue\": true|false}} on stdin after a report, got {line[:200].decode('utf-8', 'replace')!r}: "
                           "in persistent mode stdin belongs to the evoq worker") from None
    _s.stopped = not go
    return go


def _persistent():
    return _s.serving or os.environ.get("EVOQ_PERSISTENT") == "1"


def _active():
    """Whether evoq's protocol is spoken here: serving, a design read from
    stdin (by evoq or by hand), or evoq's one-shot environment."""
    return (_s.serving or _s.design is not None or bool(os.environ.get("EVOQ_DESIGN_ID"))
            or os.environ.get("EVOQ_PERSISTENT") == "1")


def _oneshot_only(what):
    if os.environ.get("EVOQ_PERSISTENT") == "1":
        raise RuntimeError(f"{what} outside serve() with EVOQ_PERSISTENT=1: the worker sends one design per "
                           "line; call evoq_eval.main(train_fn) or serve(train_fn), and design() in train_fn")


def _on_sigterm():
    # Installed at the first report, before its line goes out: a stop can
    # only follow a report, and an evaluator that never reports keeps
    # Python's default, where SIGTERM (a timeout, a shutdown) ends it at once.
    if _s.term_handler:
        return
    _s.term_handler = True
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: setattr(_s, "stopped", True))
    except ValueError:
        pass  # not the main thread: SIGTERM keeps ending the process


def _stdin():
    return sys.__stdin__.buffer  # bytes, so that the locale cannot garble UTF-8 designs


def _readline():
    """The next non-blank stdin line, or empty at EOF."""
    while (line := _stdin().readline()) and not line.strip():
        pass
    return line


def _parse_design(text):
    d = json.loads(text)
    if not isinstance(d, dict):
        raise ValueError(f"a design is a JSON object, got {type(d).__name__}")
    return d


def _finite(x, what):
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{what} must be a real number, got {type(x).__name__} {x!r} (float(t) for a tensor)")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{what} is {x}, not a finite number: report a finite value, "
                         "or raise evoq_eval.Infeasible for a training that diverged")
    return x


def _clean(v):
    """v as plain JSON; NaN and infinities become null, so that a loss
    that diverged does not cost the design its fitness."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        v = float(v)
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    raise TypeError(f"metric value {v!r} of type {type(v).__name__} is not JSON: "
                    "pass numbers, strings, bools, lists or dicts (float(t) for a tensor)")


def _emit(obj):
    line = json.dumps(obj, allow_nan=False) + "\n"
    if sys.stdout is not None:
        sys.stdout.flush()  # the user's log lines before this one go out first
    if _proxy is not None and _proxy.midline:
        line, _proxy.midline = "\n" + line, False
    _OUT.write(line)
    _OUT.flush()
