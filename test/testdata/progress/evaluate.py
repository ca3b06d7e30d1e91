"""A test evaluator that saves its progress: STEPS steps of STEP_S seconds
each (environment, defaults 12 and 0.5), its progress saved every
SAVE_EVERY steps (default 1), or at the steps SAVE_AT lists, and whenever
the worker asks for a save, and
reported after each save. It resumes from its saved progress: the result's
metrics say where it started (started_at) and the steps it trained in this
attempt, and whether it was handed its parent's checkpoint (parent_handed;
a mutant loads it, and saves a checkpoint of its own); its fitness depends on the design alone, so a resumed design ends
with the fitness it would have had. One-shot or persistent
(EVOQ_PERSISTENT=1), through the evoq_eval helper. With STEP_LOG set, each
reported step is also appended to that file as "<design> <step>"."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import evoq_eval  # noqa: E402

STEPS = int(os.environ.get("STEPS", "12"))
STEP_S = float(os.environ.get("STEP_S", "0.5"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "1"))
# SAVE_AT, a comma-separated list of steps, saves at those steps alone
# (and when asked) instead of every SAVE_EVERY.
SAVE_AT = {int(x) for x in os.environ.get("SAVE_AT", "").split(",") if x}


def train(design):
    seq = int(design["seq"])
    handed = evoq_eval.parent_checkpoint() is not None
    if design.get("origin") == "mutant":
        evoq_eval.load_parent()  # records inherited, or why not
    got = evoq_eval.resume_progress()
    start, total = 0, 0.0
    if got is not None:
        start, state = got
        if state["design"] != design["id"] or state["step"] != start:
            raise RuntimeError(f"progress of {state['design']} at {state['step']} handed to {design['id']} at {start}")
        total = state["total"]
    for step in range(start + 1, STEPS + 1):
        time.sleep(STEP_S)
        total += step * seq
        periodic = step in SAVE_AT if SAVE_AT else step % SAVE_EVERY == 0
        if periodic or evoq_eval.progress_requested():
            evoq_eval.save_progress(step, {"design": design["id"], "step": step, "total": total})
        evoq_eval.report(step, total / 1000.0, last=step == STEPS, mutant=int(design.get("origin") == "mutant"))
        if os.environ.get("STEP_LOG"):
            with open(os.environ["STEP_LOG"], "a") as f:
                f.write(f"{design['id']} {step}\n")
    evoq_eval.save({"design": design["id"]})  # its checkpoint, for its mutants
    return total, {"started_at": start, "trained_steps": STEPS - start, "pid": os.getpid(), "parent_handed": handed}


evoq_eval.main(train)
