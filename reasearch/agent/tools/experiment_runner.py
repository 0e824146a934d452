"""The background side of a training task's experiments: the threads that run them and the record of how
each ended (the tool text the agent reads is :mod:`reasearch.agent.tools.experiments`).

An experiment runs in a thread of the driver (the run's ``evaluate``: training on a leased slot, then the
trusted evaluation). The thread records the result with its debits (one experiment, its GPU-seconds) in
one store transaction, and an ``experiment`` event, whatever the loop is doing meanwhile (a model turn, a
compaction). Its log streams to ``<run>/experiments/step-NNNNN/train.log``; the task's ``status.json``
there says what it is doing; a ``STOP`` file written there stops it (recorded ``CRASH``, no score,
charged for what it used).

Concurrency: at most as many experiments of a run run at once as the task has slots here (GPUs, or CPU
slots); starting one beyond that waits until one of them ends (slots held by other processes on the
machine are waited for by the lease itself). :meth:`ExperimentRunner.settle` waits for the running ones.

Before an experiment starts, an ``experiment_start`` event is written at its step. If the driver dies
meanwhile (``kill -9``), its training processes die with it (the engine's launcher), nothing is
recorded, and the resumed agent records each such experiment as ``experiment_interrupted`` (never run
again; a takeover resume charges its reservation, one experiment, once, as for any evaluation in flight) --
unless its result had been stored before the driver died, in which case that result is what the experiment
is. Recording it interrupted also prunes the dead experiment's scratch folder and tmpfs mount.

Trust boundary: the experiment folders are written by the candidate's training code; they are read and
written only through the guarded root (no symlink in any component, regular files only, capped reads).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.agent.snapshot import EvalRecord
from reasearch.evaluators.kinds import ExperimentOptions
from reasearch.evaluators.training import TrainingTask
from reasearch.hostfs.guarded_path import Root, UnsafePathError
from reasearch.runs.events import EventKind

if TYPE_CHECKING:
    from reasearch.agent.tools.context import ToolContext

__all__ = ["ExperimentRunner", "RunningExperiment", "experiment_payload", "read_experiment_file", "read_status",
           "start_fields", "touch"]

_LOG_READ_CAP = 2 << 20
_OFFSET_CHUNK = 64 << 10
_STATUS_CAP = 64 << 10
_SUMMARY_KEYS = ("train_s", "eval_s", "gpu_s", "slot", "log_path", "last_step", "last_train_loss", "median_step_ms",
                 "first_metric_s", "started_at", "stopped")


@dataclass
class RunningExperiment:
    """An experiment this driver started and whose thread has not ended yet."""

    step: int
    description: str
    folder: Path
    time_budget_s: float
    started: float
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ExperimentRunner:
    """Runs a run's experiments in background threads and records how each ended.

    Args:
        ctx: the tool context (its run records the experiments; its task says the slot kind).
        folder: the run's experiment folders (``<run>/experiments``).
    """

    def __init__(self, ctx: ToolContext, folder: Path) -> None:
        self.ctx = ctx
        self.folder = folder
        self._running: dict[int, RunningExperiment] = {}
        self._cond = threading.Condition()

    def experiments(self) -> list[dict[str, Any]]:
        """Ended experiments of the run (finished, stopped, interrupted, failed to start), by step."""
        run = self.ctx.run
        out = [dict(e.payload, step=e.step) for e in run.events(kind=EventKind.EXPERIMENT)]
        out += [
            dict(e.payload, step=e.step, status="INTERRUPTED")
            for e in run.events(kind=EventKind.EXPERIMENT_INTERRUPTED)
        ]
        return sorted(out, key=lambda d: d["step"])

    def running(self) -> list[dict[str, Any]]:
        """Experiments of this driver still running: step, description, state (from the task), elapsed."""
        with self._cond:
            live = [r for r in self._running.values() if not r.done.is_set()]
        out = []
        for r in sorted(live, key=lambda r: r.step):
            status = read_status(r.folder)
            out.append({"step": r.step, "description": r.description, "status": "RUNNING",
                        "state": status.get("state", "starting"), "slot": status.get("slot"),
                        "elapsed_s": round(time.time() - r.started, 1), "time_budget_s": r.time_budget_s,
                        "log_path": str(r.folder / "train.log")})
        return out

    def get(self, step: int) -> RunningExperiment | None:
        """The experiment this driver started at ``step`` (running or ended), or None."""
        return self._running.get(step)

    def steps(self) -> set[int]:
        """The steps of the experiments this driver started."""
        return set(self._running)

    def start(self, step: int, start: dict[str, Any], source: str, parent: str | None,
              where: str) -> RunningExperiment:
        """Records ``experiment_start`` (``start``: its payload) at ``step``, then starts its thread."""
        self.ctx.run.log_event(step, EventKind.EXPERIMENT_START, start)
        r = RunningExperiment(step, start["description"], Path(start["folder"]), start["time_budget_s"], time.time())
        r.thread = threading.Thread(target=self._work, args=(r, source, start, parent, where),
                                    name=f"experiment-{step}", daemon=True)
        with self._cond:
            self._running[step] = r
        r.thread.start()
        return r

    def wait_for_a_slot(self) -> float:
        """Blocks while every slot (of this machine, or the Ray cluster's GPUs) runs one of this driver's
        experiments; returns the seconds waited."""
        t0 = time.monotonic()
        task = self.ctx.task
        kind = task.params.slot if isinstance(task, TrainingTask) else "auto"
        slots = _slot_count(kind)
        if kind != "cpu":  # experiments that run on a Ray cluster take its GPUs, not this machine's
            slots = max(slots, int(getattr(getattr(self.ctx.run, "executor", None), "gpu_slots", 0) or 0))
        with self._cond:
            while sum(1 for r in self._running.values() if not r.done.is_set()) >= slots:
                self._cond.wait(5.0)
        return time.monotonic() - t0

    def _work(self, r: RunningExperiment, source: str, start: dict[str, Any], parent: str | None, where: str) -> None:
        """The experiment's thread: evaluate (recorded and debited atomically by the run), then its event."""
        run = self.ctx.run
        try:
            try:
                result = run.evaluate(source, step=r.step, parent=parent,
                                      note=f"step {r.step}: {r.description[:300]} @ {where}",
                                      options=ExperimentOptions(experiment_dir=str(r.folder)))
            except Exception as exc:  # the engine failed: nothing was recorded or charged
                run.log_event(r.step, EventKind.EXPERIMENT, {**start_fields(start), "status": "ERROR", "score": None,
                                                             "feedback": f"the experiment could not run: "
                                                                         f"{type(exc).__name__}: {exc}"[:3000]})
                return
            run.log_event(r.step, EventKind.EXPERIMENT, experiment_payload(start, r.step, result))
        finally:
            r.done.set()
            with self._cond:
                self._cond.notify_all()

    def settle(self, *, stop: bool = False) -> None:
        """Waits until no experiment of this driver runs (``stop``: stops them first)."""
        with self._cond:
            live = [r for r in self._running.values() if not r.done.is_set()]
        for r in live:
            if stop:
                touch(r.folder / "STOP")
        for r in live:
            r.done.wait()

    def settle_orphans(self) -> None:
        """Ends, in the record, every started experiment that no live thread of this driver runs."""
        ended = {e["step"] for e in self.experiments()}
        with self._cond:
            mine = set(self._running)
        for e in self.ctx.run.events(kind=EventKind.EXPERIMENT_START):
            if e.step not in ended and e.step not in mine:
                self.settle_step(e.step)

    def settle_step(self, step: int) -> dict[str, Any]:
        """An experiment started by a driver that died: its stored result (recorded before the death), else
        ``experiment_interrupted`` (not charged). Returns its record."""
        run = self.ctx.run
        known = [e for e in self.experiments() if e["step"] == step]
        if known:
            return known[0]
        start = next(e for e in run.events(kind=EventKind.EXPERIMENT_START) if e.step == step).payload
        existing = run.store.get_evaluation(run.id, step)
        if existing is not None:
            run.log_event(step, EventKind.EXPERIMENT, experiment_payload(start, step, existing.result))
        else:
            run.log_event(step, EventKind.EXPERIMENT_INTERRUPTED,
                          {**start_fields(start), "reason": "the driver stopped during the experiment"})
            _prune_dead_scratch()
        return next(e for e in self.experiments() if e["step"] == step)


def _prune_dead_scratch() -> None:
    """Removes the scratch folders (and tmpfs mounts) of experiments whose driver died: a resume that runs no
    further experiment (its budget spent by the interrupted one's charge) would otherwise leave them for good."""
    from reasearch.errors import ReasearchError
    from reasearch.evaluators.training import experiments_root, prune_experiments

    try:
        prune_experiments(experiments_root())
    except (OSError, ReasearchError):  # housekeeping only: the next experiment of any process prunes again
        pass


def start_fields(start: Mapping[str, Any]) -> dict[str, Any]:
    """What an experiment's record repeats of its ``experiment_start`` event."""
    return {k: start.get(k) for k in ("description", "commit", "dirty", "candidate", "time_budget_s")}


def experiment_payload(start: Mapping[str, Any], step: int, result: Any) -> dict[str, Any]:
    """The ``experiment`` event of an ended experiment: what ran, how it ended, its evaluation record."""
    m = dict(result.metrics)
    rec = EvalRecord(
        step, start["candidate"], result.status.value, result.score, result.normalized_score, result.cached
    )
    return {**start_fields(start), "status": result.status.value, "score": result.score,
            **{k: m.get(k) for k in _SUMMARY_KEYS}, "loss_curve": m.get("loss_curve"),
            "feedback": (result.feedback or "")[-3000:], "evaluation": rec.to_dict(), "ended_at": time.time()}


def _experiments_root(folder: Path) -> Root:
    """The guarded root of the run's experiment folders (``<run>/experiments``, created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Root(folder)


def read_status(folder: Path) -> dict[str, Any]:
    """``status.json`` of one experiment folder (``{}`` when missing, unreadable or refused)."""
    try:
        fs = _experiments_root(folder.parent)
    except OSError:
        return {}
    try:
        data = json.loads(fs.read_bytes(f"{folder.name}/status.json", cap=_STATUS_CAP))
    except (OSError, ValueError, UnsafePathError):
        return {}
    finally:
        fs.close()
    return data if isinstance(data, dict) else {}


def touch(path: Path) -> None:
    """Writes ``path`` (an experiment folder's ``STOP``) beneath the experiments root, through no symlink."""
    fs = _experiments_root(path.parent.parent)
    try:
        fs.write_bytes(f"{path.parent.name}/{path.name}", b"stop\n")
    finally:
        fs.close()


def _slot_count(kind: str) -> int:
    from reasearch.engine.gpu import slot_status

    try:
        return max(1, len(slot_status(kind)))
    except Exception:  # no usable slot of that kind: the lease will say why
        return 1


def read_experiment_file(folder: Path, rel: str, offset: int | None) -> tuple[bytes, int]:
    """(bytes, file size) of ``folder/rel``: from ``offset`` (64 KB at most) or the last 2 MB, through the
    guarded reader (no symlink in any component, a regular file only)."""
    fs = _experiments_root(folder)
    try:
        if offset is not None:
            return fs.read_slice(rel, start=max(0, int(offset)), length=_OFFSET_CHUNK)
        return fs.read_slice(rel, start=None, length=_LOG_READ_CAP)
    finally:
        fs.close()
