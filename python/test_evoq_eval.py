"""Tests for evoq_eval: a real evaluator process per test, with the test
playing the evoq worker's side of the line protocol over pipes.

Run from this directory: python3 -m unittest -v test_evoq_eval
"""
import importlib.util
import json
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 30  # seconds a line or an exit may take before the test fails

# The evaluator under test; its genome says what it does.
#   reports: fitness per report, steps 1, 2, ... (or steps: the steps to use)
#   forever: report step 1, 2, ... every 10 ms until report() returns False
#   print: printed before training, without a newline
#   raise / infeasible: raise RuntimeError / evoq_eval.Infeasible with it
#   result, ret: the fitness returned (default the last reported) and how:
#                number, tuple (default), dict, env, genome
#   redirect: report with sys.stdout redirected to stderr
#   nan_metric: every report carries spread=NaN
#   last_at: the report of this step passes last=True
#   linger: seconds slept after the last report, before returning
#   stop_metrics: when report() returns False, return these metrics
# and for checkpoints, whose outcomes go into the metrics of ret "ckpt":
#   paths: metric paths = [checkpoint_out(), parent_checkpoint()]
#   save: save(it), metric saved = what save returned
#   save_numpy: save a dict of numpy values (a, s), metric saved
#   load: metric parent = load_parent(), numpy arrays as lists
#   torch: {"widths", "seed"}: build tiny(widths) after manual_seed(seed),
#          metric count = evoq_torch.start_from_parent(model), then save_model
#   metrics: more metrics train_fn returns
TINY = r'''
def tiny(widths):
    """A small MLP with named layers: fc0, fc1, ..., out."""
    import collections, torch
    layers, width = [], 4
    for i, w in enumerate(widths):
        layers += [(f"fc{i}", torch.nn.Linear(width, w)), (f"act{i}", torch.nn.ReLU())]
        width = w
    return torch.nn.Sequential(collections.OrderedDict(layers + [("out", torch.nn.Linear(width, 3))]))
'''

EVALUATOR = TINY + r'''
import contextlib, sys, time
sys.path.insert(0, sys.argv[1])
import evoq_eval


def checkpoints(g):
    """The checkpoint steps g asks for, in this order; their metrics."""
    m = {}
    if g.get("paths"):
        m["paths"] = [evoq_eval.checkpoint_out(), evoq_eval.parent_checkpoint()]
    if "torch" in g:
        import torch, evoq_torch
        torch.manual_seed(g["torch"]["seed"])
        model = tiny(g["torch"]["widths"])
        m["count"] = evoq_torch.start_from_parent(model)
        m["saved"] = evoq_torch.save_model(model)
    if g.get("load"):
        p = evoq_eval.load_parent()
        m["parent"] = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in p.items()} \
            if isinstance(p, dict) else p
    if "save" in g:
        m["saved"] = evoq_eval.save(g["save"])
    if g.get("save_numpy"):
        import numpy
        m["saved"] = evoq_eval.save({"a": numpy.arange(3.0), "s": numpy.float64(2.5)})
    m.update(g.get("metrics", {}))
    return m


def train(design):
    g = design["genome"]
    print("log: training", design["id"])
    ckpt = checkpoints(g)
    if "print" in g:
        print(g["print"], end="")
    if "raise" in g:
        raise RuntimeError(g["raise"])
    if "infeasible" in g:
        raise evoq_eval.Infeasible(g["infeasible"])
    reports = [float(f) for f in g.get("reports", [])]
    steps = g.get("steps", range(1, len(reports) + 1))
    if g.get("forever"):
        steps, reports = range(1, 3001), [s / 1000 for s in range(1, 3001)]
    extra = {"spread": float("nan")} if g.get("nan_metric") else {}
    fitness = None
    with contextlib.redirect_stdout(sys.stderr) if g.get("redirect") else contextlib.nullcontext():
        for step, f in zip(steps, reports):
            last = {"last": True} if step == g.get("last_at") else {}
            if not evoq_eval.report(step, f, loss=f / 2, **extra, **last):
                print(f"log: report({step}) returned False, stopped()={evoq_eval.stopped()}", flush=True)
                return (f, g["stop_metrics"]) if "stop_metrics" in g else None
            fitness = f
            if g.get("forever"):
                time.sleep(0.01)  # an epoch of training
    if "linger" in g:
        print("log: lingering", flush=True)
        time.sleep(g["linger"])
    r = float(g.get("result", fitness if fitness is not None else 0.5))
    ret = g.get("ret", "tuple")
    if ret == "number":
        return r
    if ret == "dict":
        return {"fitness": r, "metrics": {"ret": "dict"}}
    if ret == "env":
        return r, {"env": evoq_eval.env()._asdict()}
    if ret == "genome":
        return r, {"genome": evoq_eval.genome()}
    if ret == "ckpt":
        return r, ckpt
    return r, {"ret": "tuple", "overflow": float("inf")}


getattr(evoq_eval, sys.argv[2])(train)  # main, serve or run
'''

PROTOCOL_KEYS = ("report", "fitness", "infeasible", "error")


def setUpModule():
    global SCRIPT, TMP
    TMP = tempfile.mkdtemp(prefix="evoq_eval_test")
    SCRIPT = os.path.join(TMP, "evaluator.py")
    with open(SCRIPT, "w") as f:
        f.write(EVALUATOR)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def design(genome, seq=1, attempt=None, **fields):
    """A design as the worker sends it; fields (checkpoint_out,
    parent_checkpoint) are the persistent design line's own."""
    d = {"v": 1, "run": "r", "id": f"r-{seq}", "seq": seq, "genome": genome, "origin": "random",
         "created": "2026-01-01T00:00:00Z"}
    if attempt is not None:
        d["attempt"] = attempt
    d.update(fields)
    return d


def protocol(line):
    """The protocol object a stdout line holds, or None for a log line."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and any(k in obj for k in PROTOCOL_KEYS) else None


class Evaluator:
    """An evaluator process and the worker's end of its pipes."""

    def __init__(self, test, persistent, env=None, entry="main"):
        self.test, self.persistent, self.design_id = test, persistent, None
        e = {k: v for k, v in os.environ.items() if not k.startswith("EVOQ_")}
        e.update({"PYTHONDONTWRITEBYTECODE": "1", "EVOQ_RUN": "r", "EVOQ_SLOT": "0", "EVOQ_WORKER": "w1"})
        if persistent:
            e["EVOQ_PERSISTENT"] = "1"
        e.update(env or {})
        # A session of its own, like the worker's evaluators: SIGTERM goes to the group.
        self.p = subprocess.Popen([sys.executable, SCRIPT, HERE, entry], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=e, start_new_session=True)
        test.addCleanup(self.kill)
        self.lines, self.stdout, self.err = queue.Queue(), [], []
        self.readers = [threading.Thread(target=self._read, args=(self.p.stdout, self.lines)),
                        threading.Thread(target=self._collect, args=(self.p.stderr, self.err))]
        for t in self.readers:
            t.start()

    @staticmethod
    def _read(stream, q):
        for line in stream:
            q.put(line)
        q.put(None)

    @staticmethod
    def _collect(stream, into):
        into.append(stream.read())

    def _get(self):
        """The next stdout line, None at EOF; AssertionError after WAIT seconds."""
        try:
            line = self.lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no stdout line in {WAIT}s; stdout so far: {self.stdout}") from None
        if line is None:
            self.lines.put(None)  # EOF stays EOF for the next call
            return None
        self.stdout.append(line)
        return line.rstrip("\n")

    def line(self):
        line = self._get()
        if line is None:
            raise AssertionError(f"stdout ended; stdout: {self.stdout}; stderr: {self.stderr()}")
        return line

    def next(self):
        """The next protocol object on stdout, skipping log lines. In
        persistent mode a result echoes the id of the design sent last:
        checked here, and left out of what is returned."""
        while True:
            obj = protocol(self.line())
            if obj is None:
                continue
            if self.persistent and "report" not in obj:
                self.test.assertEqual(obj.pop("id", None), self.design_id, f"the result line {obj} must echo its design's id")
            return obj

    def send(self, obj, newline=True):
        if isinstance(obj, dict) and "genome" in obj:
            self.design_id = obj.get("id")
        self.p.stdin.write(json.dumps(obj) + ("\n" if newline else ""))
        self.p.stdin.flush()

    def close(self):
        self.p.stdin.close()

    def rest(self):
        """The stdout lines left until EOF."""
        out = []
        while (line := self._get()) is not None:
            out.append(line)
        return out

    def wait(self):
        rc = self.p.wait(timeout=WAIT)
        for t in self.readers:
            t.join(WAIT)
        return rc

    def stderr(self):
        return "".join(self.err)

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        for t in self.readers:
            t.join(WAIT)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            if not f.closed:
                f.close()


def oneshot(test, genome, env=None):
    """Run genome's design in one-shot mode: (exit code, stdout lines, stderr)."""
    ev = Evaluator(test, persistent=False, env=env)
    ev.send(design(genome), newline=False)
    ev.close()
    lines = ev.rest()
    return ev.wait(), lines, ev.stderr()


def report(step, fitness, **metrics):
    return {"report": {"step": step, "fitness": fitness, "metrics": metrics}}


class OneShotTest(unittest.TestCase):
    def test_reports_then_result(self):
        rc, lines, err = oneshot(self, {"reports": [0.1, 0.2, 0.4]})
        self.assertEqual(rc, 0, err)
        got = [protocol(line) for line in lines if protocol(line)]
        # train_fn returned without being told to stop: its last report
        # was its last, and the helper says so before the result.
        marker = {"report": {**report(3, 0.4, loss=0.2)["report"], "last": True}}
        self.assertEqual(got, [report(1, 0.1, loss=0.05), report(2, 0.2, loss=0.1), report(3, 0.4, loss=0.2), marker,
                               {"fitness": 0.4, "metrics": {"ret": "tuple", "overflow": None}}])
        self.assertEqual(lines[0], "log: training r-1")
        self.assertEqual(protocol(lines[-1]), got[-1], "the result must be the last line")

    def test_sigterm_stops_reporting(self):
        ev = Evaluator(self, persistent=False)
        ev.send(design({"forever": True}), newline=False)
        ev.close()
        self.assertEqual(ev.next()["report"]["step"], 1)
        os.killpg(ev.p.pid, signal.SIGTERM)
        lines = ev.rest()
        self.assertEqual(ev.wait(), 0, "SIGTERM must end the training cleanly, not kill it: " + ev.stderr())
        logs = [line for line in lines if line.startswith("log: report(")]
        self.assertEqual(len(logs), 1, lines)
        stop_step = int(logs[0][len("log: report("):].split(")")[0])
        self.assertIn("returned False, stopped()=True", logs[0])
        reports = [protocol(line)["report"] for line in ev.stdout if protocol(line) and "report" in protocol(line)]
        # The report that returned False went out if SIGTERM came while it was printed.
        self.assertIn([r["step"] for r in reports], [list(range(1, stop_step)), list(range(1, stop_step + 1))],
                      f"report() must print nothing once SIGTERM came; it returned False at step {stop_step}")
        self.assertEqual(protocol(lines[-1]), {"fitness": reports[-1]["fitness"], "metrics": {"stopped": True}})

    def test_last_report_marked_by_train_fn(self):
        rc, lines, err = oneshot(self, {"reports": [0.1, 0.2], "last_at": 2})
        self.assertEqual(rc, 0, err)
        got = [protocol(line) for line in lines if protocol(line)]
        self.assertEqual(got, [report(1, 0.1, loss=0.05), {"report": {**report(2, 0.2, loss=0.1)["report"], "last": True}},
                               {"fitness": 0.2, "metrics": {"ret": "tuple", "overflow": None}}],
                         "a report marked last is not repeated")

    def test_report_after_the_last_raises(self):
        rc, lines, err = oneshot(self, {"reports": [0.1, 0.2], "last_at": 1})
        self.assertEqual(rc, 1)
        self.assertIn("ValueError: report at step 2 after the last one, at step 1", err)

    def test_sigterm_after_the_last_report_keeps_the_result(self):
        # A stop decided at the last report reaches the process after
        # train_fn saw its report() return True: the design trained to its
        # end, so its result is not a stopped one.
        ev = Evaluator(self, persistent=False)
        ev.send(design({"reports": [0.1, 0.2], "linger": 0.5}), newline=False)
        ev.close()
        self.assertEqual(ev.next(), report(1, 0.1, loss=0.05))
        self.assertEqual(ev.next(), report(2, 0.2, loss=0.1))
        self.assertEqual(ev.line(), "log: lingering")
        os.killpg(ev.p.pid, signal.SIGTERM)
        got = [protocol(line) for line in ev.rest() if protocol(line)]
        self.assertEqual(ev.wait(), 0, ev.stderr())
        self.assertEqual(got, [{"report": {**report(2, 0.2, loss=0.1)["report"], "last": True}},
                               {"fitness": 0.2, "metrics": {"ret": "tuple", "overflow": None}}])

    def test_exception_exits_nonzero_with_traceback(self):
        rc, lines, err = oneshot(self, {"raise": "boom"})
        self.assertEqual(rc, 1)
        self.assertIn("Traceback", err)
        self.assertIn("RuntimeError: boom", err)
        self.assertEqual([line for line in lines if protocol(line)], [])

    def test_infeasible(self):
        rc, lines, err = oneshot(self, {"infeasible": "too big"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(protocol(lines[-1]), {"infeasible": "too big"})

    def test_nan_fitness_refused(self):
        rc, lines, err = oneshot(self, {"reports": [0.1], "result": "nan"})
        self.assertEqual(rc, 1)
        self.assertIn("ValueError: train_fn's fitness is nan, not a finite number", err)
        self.assertNotIn("NaN", "".join(lines))
        self.assertEqual([protocol(line) for line in lines if protocol(line)], [report(1, 0.1, loss=0.05)],
                         "no result line")

    def test_return_conventions(self):
        cases = {"number": {"fitness": 0.7}, "dict": {"fitness": 0.7, "metrics": {"ret": "dict"}},
                 "tuple": {"fitness": 0.7, "metrics": {"ret": "tuple", "overflow": None}},
                 "genome": {"fitness": 0.7, "metrics": {"genome": {"result": 0.7, "ret": "genome"}}}}
        for ret, want in cases.items():
            with self.subTest(ret=ret):
                rc, lines, err = oneshot(self, {"result": 0.7, "ret": ret})
                self.assertEqual(rc, 0, err)
                self.assertEqual(protocol(lines[-1]), want)

    def test_env(self):
        env = {"EVOQ_DESIGN_ID": "r-1", "EVOQ_ATTEMPT": "2", "EVOQ_SLOT": "3", "EVOQ_GPU": "1"}
        rc, lines, err = oneshot(self, {"ret": "env"}, env=env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(protocol(lines[-1])["metrics"]["env"],
                         {"run": "r", "design_id": "r-1", "attempt": 2, "slot": 3, "worker": "w1", "gpu": "1",
                          "persistent": False})

    def test_log_output_mid_line_and_redirected(self):
        rc, lines, err = oneshot(self, {"print": "partial", "reports": [0.1], "redirect": True})
        self.assertEqual(rc, 0, err)
        self.assertEqual(lines[:3], ["log: training r-1", "partial", json.dumps(report(1, 0.1, loss=0.05))])
        self.assertNotIn("report", err, "protocol lines belong on the real stdout")

    def test_bad_steps_raise(self):
        for name, steps in {"repeated": [1, 1], "decreasing": [2, 1], "negative": [-1], "float": [1.5]}.items():
            with self.subTest(name):
                rc, _, err = oneshot(self, {"reports": [0.1] * len(steps), "steps": steps})
                self.assertEqual(rc, 1)
                self.assertIn("ValueError: report step", err)

    def test_no_design_on_stdin(self):
        ev = Evaluator(self, persistent=False)
        ev.close()
        ev.rest()
        self.assertEqual(ev.wait(), 1)
        self.assertIn("no design on stdin", ev.stderr())


def finish(test, ev):
    """Close stdin between designs: the evaluator must exit 0 with nothing more to say."""
    ev.close()
    test.assertEqual([line for line in ev.rest() if protocol(line)], [])
    test.assertEqual(ev.wait(), 0, ev.stderr())


class PersistentTest(unittest.TestCase):
    def setUp(self):
        self.ev = Evaluator(self, persistent=True)

    def finish(self):
        finish(self, self.ev)

    def test_continue_stop_and_next_design(self):
        ev = self.ev
        ev.send(design({"reports": [0.1, 0.2, 0.3]}, seq=1, attempt=1))
        for step, f in [(1, 0.1), (2, 0.2), (3, 0.3)]:
            self.assertEqual(ev.next(), report(step, f, loss=f / 2))
            ev.send({"continue": True})
        self.assertEqual(ev.next(), {"fitness": 0.3, "metrics": {"ret": "tuple", "overflow": None}})

        ev.send(design({"reports": [0.1, 0.2, 0.3, 0.4]}, seq=2, attempt=1))
        self.assertEqual(ev.next(), report(1, 0.1, loss=0.05))
        ev.send({"continue": True})
        self.assertEqual(ev.next(), report(2, 0.2, loss=0.1))
        ev.send({"continue": False, "reason": "below the median at rung 2"})
        self.assertEqual(ev.line(), "log: report(2) returned False, stopped()=True")
        self.assertEqual(ev.next(), {"fitness": 0.2, "metrics": {"stopped": True}})

        ev.send(design({"reports": [0.9]}, seq=3, attempt=1))
        self.assertEqual(ev.next(), report(1, 0.9, loss=0.45))
        ev.send({"continue": True})
        self.assertEqual(ev.next(), {"fitness": 0.9, "metrics": {"ret": "tuple", "overflow": None}})
        self.finish()

    def test_last_report(self):
        # Marked by train_fn, answered like any report; no marker follows
        # in persistent mode, where report() waits for its answer.
        ev = self.ev
        ev.send(design({"reports": [0.1, 0.2], "last_at": 2}, seq=1, attempt=1))
        self.assertEqual(ev.next(), report(1, 0.1, loss=0.05))
        ev.send({"continue": True})
        self.assertEqual(ev.next(), {"report": {**report(2, 0.2, loss=0.1)["report"], "last": True}})
        ev.send({"continue": True})
        self.assertEqual(ev.next(), {"fitness": 0.2, "metrics": {"ret": "tuple", "overflow": None}})
        ev.send(design({"reports": [0.3]}, seq=2, attempt=1))
        self.assertEqual(ev.next(), report(1, 0.3, loss=0.15))
        ev.send({"continue": True})
        self.assertEqual(ev.next(), {"fitness": 0.3, "metrics": {"ret": "tuple", "overflow": None}})
        self.finish()

    def test_stopped_result_keeps_train_fn_metrics(self):
        ev = self.ev
        ev.send(design({"reports": [0.1, 0.2], "stop_metrics": {"params": 7}}, seq=1, attempt=1))
        self.assertEqual(ev.next(), report(1, 0.1, loss=0.05))
        ev.send({"continue": False, "reason": "asha"})
        self.assertEqual(ev.next(), {"fitness": 0.1, "metrics": {"params": 7, "stopped": True}})
        self.finish()

    def test_failures_are_results_and_serving_goes_on(self):
        cases = [
            ("exception", {"raise": "boom"}, {"error": "RuntimeError: boom"}),
            ("infeasible", {"infeasible": "too big"}, {"infeasible": "too big"}),
            ("nan result", {"result": "nan"},
             {"error": "ValueError: train_fn's fitness is nan, not a finite number: report a finite value, "
                       "or raise evoq_eval.Infeasible for a training that diverged"}),
            ("nan report", {"reports": ["nan"]}, None),
            ("inf report", {"reports": ["inf"]}, None),
            ("repeated step", {"reports": [0.1, 0.2], "steps": [1, 1]}, None),
        ]
        for seq, (name, genome, want) in enumerate(cases, 1):
            with self.subTest(name):
                self.ev.send(design(genome, seq=seq, attempt=1))
                got = self.ev.next()
                if "steps" in genome:  # the first report is fine and answered
                    self.assertEqual(got, report(1, 0.1, loss=0.05))
                    self.ev.send({"continue": True})
                    got = self.ev.next()
                if want is None:
                    self.assertTrue(got.get("error", "").startswith("ValueError: report"), got)
                else:
                    self.assertEqual(got, want)
        self.ev.send(design({"reports": [0.5]}, seq=99, attempt=1))
        self.assertEqual(self.ev.next(), report(1, 0.5, loss=0.25))
        self.ev.send({"continue": True})
        self.assertEqual(self.ev.next()["fitness"], 0.5)
        self.finish()
        self.assertIn("RuntimeError: boom", self.ev.stderr())
        self.assertIn("Traceback", self.ev.stderr())

    def test_nan_metrics_become_null(self):
        self.ev.send(design({"reports": [0.1], "nan_metric": True}, attempt=1))
        self.assertEqual(self.ev.next(), report(1, 0.1, loss=0.05, spread=None))
        self.ev.send({"continue": True})
        self.assertEqual(self.ev.next()["fitness"], 0.1)
        self.finish()

    def test_eof_while_waiting_for_an_answer(self):
        self.ev.send(design({"reports": [0.1, 0.2]}, attempt=1))
        self.assertEqual(self.ev.next(), report(1, 0.1, loss=0.05))
        self.ev.close()
        lines = self.ev.rest()
        self.assertIn("log: report(1) returned False, stopped()=True", lines)
        self.assertEqual([protocol(line) for line in lines if protocol(line)],
                         [{"id": "r-1", "fitness": 0.1, "metrics": {"stopped": True}}])
        self.assertEqual(self.ev.wait(), 0, self.ev.stderr())

    def test_env_and_blank_lines(self):
        self.ev.p.stdin.write("\n\n")
        self.ev.send(design({"ret": "env"}, seq=4, attempt=3))
        self.assertEqual(self.ev.next()["metrics"]["env"],
                         {"run": "r", "design_id": "r-4", "attempt": 3, "slot": 0, "worker": "w1", "gpu": None,
                          "persistent": True})
        self.finish()

    def test_eof_before_any_design(self):
        self.finish()

    def test_result_lines_echo_the_design_id(self):
        """The worker takes a result only for the design it is serving: each result line names it, first."""
        for seq, genome in [(7, {"reports": []}), (8, {"raise": "boom"}), (9, {"infeasible": "too big"})]:
            self.ev.send(design(genome, seq=seq, attempt=1))
            line = next(line for line in iter(self.ev.line, None) if protocol(line))
            self.assertTrue(line.startswith('{"id": "r-%d", ' % seq), line)
        self.finish()

    def test_bad_answer_is_an_error(self):
        self.ev.send(design({"reports": [0.1, 0.2]}, attempt=1))
        self.assertEqual(self.ev.next(), report(1, 0.1, loss=0.05))
        self.ev.p.stdin.write("yes\n")
        self.ev.p.stdin.flush()
        self.assertEqual(self.ev.next(), {"error": "RuntimeError: want {\"continue\": true|false} on stdin after a "
                                                   "report, got 'yes\\n': in persistent mode stdin belongs to the "
                                                   "evoq worker"})
        self.finish()


def has(module):
    return importlib.util.find_spec(module) is not None


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


class Printer:
    """Pickles as a call to print: a checkpoint that would run code when loaded."""

    def __reduce__(self):
        return print, ("pwned",)


class CheckpointFiles:
    """A temporary directory for a test's checkpoints and the bad files a
    parent checkpoint can be, each with the start of its inherit_reason."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="evoq_ckpt")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def bad_parents(self):
        unreadable = "parent checkpoint unreadable: "
        return {
            "corrupt": (write(self.path("corrupt"), b"garbage\x00\x01"), unreadable + "UnpicklingError: "),
            "empty": (write(self.path("empty"), b""), unreadable + "EOFError: "),
            "missing": (self.path("missing"), unreadable + "FileNotFoundError: "),
            "code": (write(self.path("code"), pickle.dumps(Printer())),
                     unreadable + "UnpicklingError: builtins.print is not plain data"),
            "two pickles": (write(self.path("two"), pickle.dumps(1) + pickle.dumps(2)),
                            unreadable + "UnpicklingError: data after the first pickle"),
            "broken zip": (write(self.path("zip"), b"PK\x03\x04" + b"\x00" * 64), unreadable),
        }


class CheckpointOneShotTest(CheckpointFiles, unittest.TestCase):
    def metrics(self, genome, env=None):
        rc, lines, err = oneshot(self, dict(genome, ret="ckpt"), env=env)
        self.assertEqual(rc, 0, err)
        self.err = err
        return protocol(lines[-1]).get("metrics", {})

    def test_paths(self):
        self.assertEqual(self.metrics({"paths": True}), {"paths": [None, None]})
        self.assertEqual(self.metrics({"paths": True}, env={"EVOQ_CHECKPOINT_OUT": "", "EVOQ_PARENT_CHECKPOINT": ""}),
                         {"paths": [None, None]}, "an empty variable is no path")
        env = {"EVOQ_CHECKPOINT_OUT": self.path("out"), "EVOQ_PARENT_CHECKPOINT": self.path("parent")}
        self.assertEqual(self.metrics({"paths": True}, env=env), {"paths": [self.path("out"), self.path("parent")]})

    def test_save_without_checkpoints(self):
        self.assertEqual(self.metrics({"save": {"w": 1}}), {"saved": False},
                         "no inheritance metrics unless the evaluator asked for its parent")
        self.assertEqual(os.listdir(self.dir), [])

    def test_save_and_load_round_trip(self):
        obj = {"w": [1.5, -2, None], "name": "x", "nested": {"k": [True]}}
        out = self.path("r-1.ckpt")
        self.assertEqual(self.metrics({"save": obj}, env={"EVOQ_CHECKPOINT_OUT": out}), {"saved": True})
        self.assertEqual(os.listdir(self.dir), ["r-1.ckpt"], "no partial file left behind")
        with open(out, "rb") as f:
            self.assertEqual(pickle.load(f), obj, "without torch imported, a checkpoint is a pickle")
        self.assertEqual(self.metrics({"load": True}, env={"EVOQ_PARENT_CHECKPOINT": out}),
                         {"parent": obj, "inherited": True})

    def test_save_replaces(self):
        out = self.path("r-1.ckpt")
        write(out, b"an earlier save")
        self.assertEqual(self.metrics({"save": [2]}, env={"EVOQ_CHECKPOINT_OUT": out}), {"saved": True})
        self.assertEqual(self.metrics({"load": True}, env={"EVOQ_PARENT_CHECKPOINT": out}),
                         {"parent": [2], "inherited": True})

    @unittest.skipUnless(has("numpy"), "numpy is not importable")
    def test_numpy_round_trip(self):
        out = self.path("r-1.ckpt")
        self.assertEqual(self.metrics({"save_numpy": True}, env={"EVOQ_CHECKPOINT_OUT": out}), {"saved": True})
        self.assertEqual(self.metrics({"load": True}, env={"EVOQ_PARENT_CHECKPOINT": out}),
                         {"parent": {"a": [0.0, 1.0, 2.0], "s": 2.5}, "inherited": True})

    def test_no_parent_checkpoint(self):
        self.assertEqual(self.metrics({"load": True}),
                         {"parent": None, "inherited": False, "inherit_reason": "no parent checkpoint"})

    def test_unreadable_parent_is_none_with_the_reason(self):
        for name, (path, reason) in self.bad_parents().items():
            with self.subTest(name):
                m = self.metrics({"load": True}, env={"EVOQ_PARENT_CHECKPOINT": path})
                self.assertEqual((m["parent"], m["inherited"]), (None, False), m)
                self.assertTrue(m["inherit_reason"].startswith(reason), m["inherit_reason"])
                self.assertIn("evoq_eval: parent checkpoint unreadable", self.err)
                self.assertNotIn("pwned", self.err)

    def test_long_reason_is_clipped(self):
        # An unpickler error naming a 2,000-character module.
        path = write(self.path("long"), b"c" + b"m" * 2000 + b"\nf\n.")
        reason = self.metrics({"load": True}, env={"EVOQ_PARENT_CHECKPOINT": path})["inherit_reason"]
        self.assertLess(len(reason), 300, reason)
        self.assertIn(" ... ", reason)
        self.assertTrue(reason.endswith("numpy arrays"), "the end of the message is kept: " + reason)

    def test_own_metrics_win(self):
        self.assertEqual(self.metrics({"load": True, "metrics": {"inherited": "mine"}}),
                         {"parent": None, "inherited": "mine", "inherit_reason": "no parent checkpoint"})


class CheckpointPersistentTest(CheckpointFiles, unittest.TestCase):
    def setUp(self):
        super().setUp()
        # Variables a one-shot evaluator would read: stale for a process serving many designs.
        self.ev = Evaluator(self, persistent=True, env={"EVOQ_CHECKPOINT_OUT": self.path("stale"),
                                                         "EVOQ_PARENT_CHECKPOINT": self.path("stale")})

    def result(self, seq, genome, **fields):
        self.ev.send(design(dict(genome, ret="ckpt"), seq=seq, attempt=1, **fields))
        return self.ev.next()

    def test_per_design_paths_and_metrics(self):
        out1, out2 = self.path("r-1.ckpt"), self.path("r-2.ckpt")
        self.assertEqual(self.result(1, {"paths": True, "save": {"n": 1}}, checkpoint_out=out1),
                         {"fitness": 0.5, "metrics": {"paths": [out1, None], "saved": True}})
        self.assertEqual(self.result(2, {"paths": True, "load": True}, checkpoint_out=out2, parent_checkpoint=out1),
                         {"fitness": 0.5, "metrics": {"paths": [out2, out1], "parent": {"n": 1}, "inherited": True}})
        self.assertEqual(self.result(3, {"paths": True, "save": 1}),
                         {"fitness": 0.5, "metrics": {"paths": [None, None], "saved": False}},
                         "the previous design's paths and inheritance are not this one's")
        bad, reason = self.bad_parents()["corrupt"]
        got = self.result(4, {"load": True}, parent_checkpoint=bad)["metrics"]
        self.assertTrue(got["inherit_reason"].startswith(reason), got)
        self.assertEqual(self.result(5, {"load": True}),
                         {"fitness": 0.5, "metrics": {"parent": None, "inherited": False,
                                                      "inherit_reason": "no parent checkpoint"}})
        self.assertEqual(self.result(6, {}), {"fitness": 0.5})
        self.assertFalse(os.path.exists(self.path("stale")))
        finish(self, self.ev)

    def test_stopped_result_carries_inheritance(self):
        parent = self.path("r-1.ckpt")
        write(parent, pickle.dumps({"n": 1}, protocol=4))
        self.ev.send(design({"load": True, "reports": [0.1, 0.2]}, attempt=1, parent_checkpoint=parent))
        self.assertEqual(self.ev.next(), report(1, 0.1, loss=0.05))
        self.ev.send({"continue": False, "reason": "below the median"})
        self.assertEqual(self.ev.next(), {"fitness": 0.1, "metrics": {"inherited": True, "stopped": True}})
        finish(self, self.ev)


@unittest.skipUnless(has("torch"), "torch is not importable (Debian: apt-get install python3-torch)")
class TorchTest(CheckpointFiles, unittest.TestCase):
    """evoq_torch through a persistent evaluator, the way evaluate.py uses it."""

    @classmethod
    def setUpClass(cls):
        global torch
        import torch
        scope = {}
        exec(TINY, scope)
        cls.tiny = staticmethod(scope["tiny"])

    def model(self, widths, seed):
        torch.manual_seed(seed)
        return self.tiny(widths)

    def child(self, seq, parent, widths=(5, 7)):
        """Evaluate a child of widths (seed 2) inheriting from parent: its
        metrics and the state_dict it saved."""
        out = self.path(f"r-{seq}.ckpt")
        fields = {"checkpoint_out": out} | ({"parent_checkpoint": parent} if parent else {})
        self.ev.send(design({"torch": {"widths": list(widths), "seed": 2}, "ret": "ckpt"}, seq=seq, attempt=1,
                            **fields))
        metrics = self.ev.next()["metrics"]
        return metrics, torch.load(out, weights_only=True)

    def assertTensors(self, got, want, names):
        for name in names:
            self.assertTrue(torch.equal(got[name], want[name]), name)

    def test_inherit(self):
        self.ev = Evaluator(self, persistent=True)
        parent = self.model([5, 6], seed=1).state_dict()
        fresh = self.model([5, 7], seed=2).state_dict()
        resized = ["fc1.weight", "fc1.bias", "out.weight"]

        # A training checkpoint with the state_dict under "model": fc0 (4x5 + 5) and out.bias (3) fit.
        torch.save({"model": parent, "epoch": 3}, self.path("p1"))
        metrics, got = self.child(1, self.path("p1"))
        self.assertEqual(metrics, {"count": 28, "saved": True, "inherited": True, "inherited_params": 28})
        self.assertTensors(got, parent, ["fc0.weight", "fc0.bias", "out.bias"])
        self.assertTensors(got, fresh, resized)
        self.assertFalse(torch.equal(got["fc0.weight"], fresh["fc0.weight"]), "the seeds must differ")

        torch.save(parent, self.path("p2"))  # a bare state_dict, every tensor fits
        metrics, got = self.child(2, self.path("p2"), widths=(5, 6))
        self.assertEqual(metrics["count"], sum(t.numel() for t in parent.values()))
        self.assertTensors(got, parent, parent)

        torch.save({"other.weight": torch.zeros(5, 4), "fc0.weight": torch.zeros(4, 5)}, self.path("p3"))
        cases = [
            ("no match", self.path("p3"), {"inherited": False, "inherited_params": 0,
                                           "inherit_reason": "no parameter matched in name and shape"}),
            ("no parent", None, {"inherited": False, "inherit_reason": "no parent checkpoint"}),
            ("not a state_dict", self.path("p4"), {"inherited": False, "inherited_params": 0,
                                                   "inherit_reason": "parent checkpoint holds a list, not a state_dict"}),
        ]
        torch.save([1, 2], self.path("p4"))
        for seq, (name, path, want) in enumerate(cases, 3):
            with self.subTest(name):
                metrics, got = self.child(seq, path)
                self.assertEqual(metrics, {"count": 0, "saved": True, **want})
                self.assertTensors(got, fresh, fresh)

        for seq, (name, (path, reason)) in enumerate(self.bad_parents().items(), 10):
            with self.subTest(name):
                metrics, got = self.child(seq, path)
                self.assertEqual((metrics["count"], metrics["inherited"]), (0, False), metrics)
                self.assertTrue(metrics["inherit_reason"].startswith(reason), metrics)
                self.assertTensors(got, fresh, fresh)
        finish(self, self.ev)

    def test_torch_checkpoint_without_torch_imported(self):
        """A torch.save file makes load_parent import torch; weights_only keeps it to tensors."""
        torch.save({"k": torch.tensor([1.0, 2.0])}, self.path("p"))
        rc, lines, err = oneshot(self, {"load": True, "ret": "ckpt"}, env={"EVOQ_PARENT_CHECKPOINT": self.path("p")})
        self.assertEqual(rc, 0, err)
        self.assertEqual(protocol(lines[-1])["metrics"], {"parent": {"k": [1.0, 2.0]}, "inherited": True})


OUTSIDE = r'''
import sys
sys.path.insert(0, sys.argv[1])
import evoq_eval


def train(genome):  # an evaluator's train, called as a notebook or an Optuna objective would
    for epoch in range(1, genome["epochs"] + 1):
        if evoq_eval.report(epoch, epoch / 10, loss=float("nan")) is not True:
            raise AssertionError("report() outside evoq must return True")
    return epoch / 10


print([train({"epochs": 3}), train({"epochs": 2}), train({"epochs": 3})])
for bad in [(1, float("nan")), (1.5, 0.1), (-1, 0.1)]:
    try:
        evoq_eval.report(*bad)
    except ValueError:
        print("refused", bad)
try:
    evoq_eval.report(1, 0.1, model=object())
except TypeError:
    print("refused a metric")
'''


class OutsideEvoqTest(unittest.TestCase):
    def test_several_designs_report_in_one_process(self):
        """Outside evoq report() checks its arguments, prints nothing and never stops, design after design."""
        script = os.path.join(TMP, "outside.py")
        with open(script, "w") as f:
            f.write(OUTSIDE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVOQ_")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        p = subprocess.run([sys.executable, script, HERE], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=env, timeout=WAIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["[0.3, 0.2, 0.3]", "refused (1, nan)", "refused (1.5, 0.1)",
                                                 "refused (-1, 0.1)", "refused a metric"])


class EntryTest(unittest.TestCase):
    def test_serve_without_evoq_persistent(self):
        """serve() is persistent mode, whatever the environment says."""
        ev = Evaluator(self, persistent=False, entry="serve")
        ev.send(design({"ret": "env"}, seq=5, attempt=2))
        self.assertEqual(ev.next()["metrics"]["env"],
                         {"run": "r", "design_id": "r-5", "attempt": 2, "slot": 0, "worker": "w1", "gpu": None,
                          "persistent": True})
        finish(self, ev)

    def test_run_refuses_evoq_persistent(self):
        """run() with EVOQ_PERSISTENT=1 would read every design as one: it says what to call."""
        ev = Evaluator(self, persistent=True, entry="run")
        ev.send(design({"reports": [0.1]}, attempt=1))
        ev.close()
        self.assertEqual([line for line in ev.rest() if protocol(line)], [])
        self.assertEqual(ev.wait(), 1)
        self.assertIn("RuntimeError: run() outside serve() with EVOQ_PERSISTENT=1", ev.stderr())
        self.assertIn("call evoq_eval.main(train_fn) or serve(train_fn)", ev.stderr())


# An evaluator of 4 steps that resumes from its saved progress and saves
# after each step, before its report; its result says where it started.
PROGRESS_EVALUATOR = r"""
import sys
sys.path.insert(0, sys.argv[1])
import evoq_eval


def train(d):
    got = evoq_eval.resume_progress()
    start, total = (got[0], got[1]["total"]) if got else (0, 0)
    saved = []
    for step in range(start + 1, 5):
        total += step
        saved.append(evoq_eval.save_progress(step, {"total": total}))
        evoq_eval.report(step, float(total))
    return float(total), {"started_at": start, "saved": saved, "asked": evoq_eval.progress_requested()}


evoq_eval.main(train)
"""


class ProgressTest(CheckpointFiles, unittest.TestCase):
    def run_oneshot(self, env):
        script = self.path("progress.py")
        write(script, PROGRESS_EVALUATOR.encode())
        e = {k: v for k, v in os.environ.items() if not k.startswith("EVOQ_")}
        e.update({"EVOQ_RUN": "r", "EVOQ_DESIGN_ID": "r-1", "EVOQ_ATTEMPT": "2"}, **env)
        p = subprocess.run([sys.executable, script, HERE], input=json.dumps(design({})), capture_output=True,
                           text=True, env=e, timeout=WAIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")], p.stderr

    def test_save_then_report_each_step(self):
        out = self.path("progress.out")
        lines, _ = self.run_oneshot({"EVOQ_PROGRESS_OUT": out})
        self.assertEqual(lines[:2], [{"progress": {"step": 1}}, {"report": {"step": 1, "fitness": 1.0}}], "a save goes out before its report")
        self.assertEqual(lines[-1], {"fitness": 10.0, "metrics": {"started_at": 0, "saved": [True] * 4, "asked": False}})
        with open(out, "rb") as f:
            self.assertEqual(pickle.load(f), {"evoq_eval": {"inherit": {}}, "progress": {"total": 10}})
        self.assertEqual(sorted(os.listdir(self.dir)), ["progress.out", "progress.py"], "no partial file left behind")

    def test_resume(self):
        prog = write(self.path("in"), pickle.dumps({"evoq_eval": {"inherit": {"inherited": True}}, "progress": {"total": 3}}))
        lines, _ = self.run_oneshot({"EVOQ_PROGRESS_IN": prog, "EVOQ_RESUME_STEP": "2"})
        self.assertEqual([line["report"]["step"] for line in lines if "report" in line], [3, 4, 4],
                         "reports continue after the resume point (the last repeated, marked last)")
        self.assertEqual(lines[-1], {"fitness": 10.0, "metrics": {"inherited": True, "started_at": 2, "saved": [False] * 2,
                                                                  "asked": False}},
                         "the result says what the attempt it resumed from recorded of its inheritance")

    def test_unreadable_progress_trains_from_scratch(self):
        bad = dict(self.bad_parents(), foreign=(write(self.path("foreign"), pickle.dumps({"total": 3})), None))
        for name, (path, _) in bad.items():
            with self.subTest(name):
                lines, err = self.run_oneshot({"EVOQ_PROGRESS_IN": path, "EVOQ_RESUME_STEP": "2"})
                m = lines[-1]["metrics"]
                self.assertEqual((lines[-1]["fitness"], m["started_at"]), (10.0, 0), lines[-1])
                self.assertTrue(m["progress_unusable"], m)
                self.assertIn("evoq_eval: saved progress unusable", err)
                self.assertNotIn("pwned", err)

    def test_requested(self):
        req = write(self.path("save"), b"")
        lines, _ = self.run_oneshot({"EVOQ_PROGRESS_REQUEST": req})
        self.assertTrue(lines[-1]["metrics"]["asked"])

    def test_persistent_per_design(self):
        script = self.path("progress.py")
        write(script, PROGRESS_EVALUATOR.encode())
        e = {k: v for k, v in os.environ.items() if not k.startswith("EVOQ_")}
        e.update({"EVOQ_PERSISTENT": "1", "EVOQ_PROGRESS_OUT": self.path("stale")})
        prog = write(self.path("in"), pickle.dumps({"evoq_eval": {}, "progress": {"total": 6}}))
        designs = [design({}, seq=1, attempt=2, progress_in=prog, resume_step=3, progress_out=self.path("o1")),
                   design({}, seq=2, attempt=1)]
        p = subprocess.Popen([sys.executable, script, HERE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=e)
        self.addCleanup(p.kill)
        results = []
        for d in designs:
            p.stdin.write(json.dumps(d) + "\n")
            p.stdin.flush()
            while True:
                obj = json.loads(p.stdout.readline())
                if "report" in obj:
                    p.stdin.write('{"continue": true}\n')
                    p.stdin.flush()
                elif "fitness" in obj:
                    results.append(obj)
                    break
        p.stdin.close()
        p.wait(WAIT)
        self.assertEqual(results[0]["metrics"], {"started_at": 3, "saved": [True], "asked": False})
        self.assertEqual(results[1]["metrics"], {"started_at": 0, "saved": [False] * 4, "asked": False},
                         "the next design's paths are its own line's: none, not the stale variable")
        self.assertFalse(os.path.exists(self.path("stale")))


@unittest.skipUnless(has("torch"), "torch is not importable")
class TorchProgressTest(CheckpointFiles, unittest.TestCase):
    """evoq_torch.save_progress and resume, in this process, one-shot."""

    def setUp(self):
        super().setUp()
        sys.path.insert(0, HERE)
        import evoq_torch
        self.et = evoq_torch
        saved = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
        for k in [k for k in os.environ if k.startswith("EVOQ_")]:
            del os.environ[k]

    def model_and_optimizer(self, seed):
        import torch
        torch.manual_seed(seed)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        return model, opt

    def test_round_trip(self):
        import torch
        out = self.path("progress")
        os.environ["EVOQ_PROGRESS_OUT"] = out
        model, opt = self.model_and_optimizer(1)
        self.assertTrue(self.et.save_progress(7, model, opt))
        del os.environ["EVOQ_PROGRESS_OUT"]
        os.environ.update({"EVOQ_PROGRESS_IN": out, "EVOQ_RESUME_STEP": "7"})
        fresh, fresh_opt = self.model_and_optimizer(2)
        self.assertEqual(self.et.resume(fresh, fresh_opt), 7)
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(fresh.state_dict()[k], v), k)
        self.assertEqual(fresh_opt.state_dict()["state"][0]["momentum_buffer"].tolist(),
                         opt.state_dict()["state"][0]["momentum_buffer"].tolist())

    def test_nothing_or_unusable_is_zero(self):
        import torch
        model, opt = self.model_and_optimizer(2)
        self.assertEqual(self.et.resume(model, opt), 0)
        os.environ.update({"EVOQ_PROGRESS_IN": write(self.path("other"), pickle.dumps({"model": {"w": 1}})),
                           "EVOQ_RESUME_STEP": "3"})
        before = {k: v.clone() for k, v in model.state_dict().items()}
        self.assertEqual(self.et.resume(model, opt), 0)
        for k, v in before.items():
            self.assertTrue(torch.equal(model.state_dict()[k], v), "a failed resume keeps the model's own weights")


if __name__ == "__main__":
    unittest.main()
