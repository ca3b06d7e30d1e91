"""Tests for evoq_eval: a real evaluator process per test, with the test
playing the evoq worker's side of the line protocol over pipes.

Run from this directory: python3 -m unittest -v test_evoq_eval
"""
import json
import os
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
EVALUATOR = r'''
import contextlib, sys, time
sys.path.insert(0, sys.argv[1])
import evoq_eval


def train(design):
    g = design["genome"]
    print("log: training", design["id"])
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
            if not evoq_eval.report(step, f, loss=f / 2, **extra):
                print(f"log: report({step}) returned False, stopped()={evoq_eval.stopped()}", flush=True)
                return None
            fitness = f
            if g.get("forever"):
                time.sleep(0.01)  # an epoch of training
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


def design(genome, seq=1, attempt=None):
    d = {"v": 1, "run": "r", "id": f"r-{seq}", "seq": seq, "genome": genome, "origin": "random",
         "created": "2026-01-01T00:00:00Z"}
    if attempt is not None:
        d["attempt"] = attempt
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
        """The next protocol object on stdout, skipping log lines."""
        while True:
            obj = protocol(self.line())
            if obj is not None:
                return obj

    def send(self, obj, newline=True):
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
        self.assertEqual(got, [report(1, 0.1, loss=0.05), report(2, 0.2, loss=0.1), report(3, 0.4, loss=0.2),
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
                         [{"fitness": 0.1, "metrics": {"stopped": True}}])
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

    def test_bad_answer_is_an_error(self):
        self.ev.send(design({"reports": [0.1, 0.2]}, attempt=1))
        self.assertEqual(self.ev.next(), report(1, 0.1, loss=0.05))
        self.ev.p.stdin.write("yes\n")
        self.ev.p.stdin.flush()
        self.assertEqual(self.ev.next(), {"error": "RuntimeError: want {\"continue\": true|false} on stdin after a "
                                                   "report, got 'yes\\n': in persistent mode stdin belongs to the "
                                                   "evoq worker"})
        self.finish()


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


if __name__ == "__main__":
    unittest.main()
