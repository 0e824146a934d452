"""Experiment trackers: a run's parameters, spend, curve, best candidate and interventions, written to MLflow or
Weights & Biases (the ``trackers`` extra: ``mlflow-skinny`` and ``wandb``, both optional).

One code path for both uses: :class:`RunSync` reads the run from the store and logs what it has not logged
yet, one metric step per evaluation (its 1-based index in the run): ``best_score`` (the best so far),
``score`` and ``normalized_score`` (OK evaluations only), ``ok`` (1/0), ``dollars`` and ``tokens`` spent
up to its step, ``interventions`` (a person's steering interventions recorded up to its step). Parameters
(run and task ids, seed, method, fleet, models, caps as ``cap.<unit>``, task parameters as
``task.<name>``) are logged first; at the end the spend per unit (``spent.<unit>``), the best score and
its normalized value go to the summary, the best candidate's source to the artifact
``best_candidate.txt``, and the interventions to ``interventions.json``. :func:`export_run` does it once
for a run in the store; :class:`LiveTracking` does it every few seconds in a thread while runs go
(``--track`` on ``optimize``, ``fleet run`` and ``compare``).

Interventions (:func:`interventions_of`) are read from the event log by kind: an event of kind
:data:`INTERVENTION` (``intervention``) is one, whatever its payload; an event of kind :data:`APPLIED`
(``steer``, or ``steer.N``) at a step >= 0 holds the batch a driver applied at that step, one per item of
its payload's ``interventions`` list (the steering journal of issue 41 item 1).

Where it goes: MLflow to ``$MLFLOW_TRACKING_URI`` (default ``./mlruns``, a file store; MLflow keeps its file
store in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``, which is set for a local folder only) in the
experiment ``$MLFLOW_EXPERIMENT_NAME`` (default ``reasearch``); W&B to ``$WANDB_PROJECT`` (default
``reasearch``) as its own settings say (``WANDB_MODE=offline`` and ``WANDB_DIR`` for a local run).

Trust boundary: the texts logged (a candidate's source, an intervention's text, a model name) are data for
the tracker, never evaluated here; every parameter is capped in length.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from reasearch.errors import ConfigError
from reasearch.evaluators.scores import is_better
from reasearch.reports._model import cap_text, load_run
from reasearch.runs.events import base_kind
from reasearch.runs.store import Store, open_store

__all__ = ["TRACKERS", "INTERVENTION", "APPLIED", "PINS", "check_tracker", "export_run", "RunSync", "LiveTracking",
           "MlflowSink", "WandbSink", "open_sink", "interventions_of"]

TRACKERS = ("mlflow", "wandb")
INTERVENTION = "intervention"  # the event kind of a person's steering intervention (issue 41 item 1)
APPLIED = "steer"  # the event kind of a batch of interventions a driver applied at a step
PINS = {"mlflow": "mlflow-skinny==3.18.0", "wandb": "wandb==0.31.0"}  # as pyproject.toml's `trackers` extra
_PARAM_CHARS = 500
_MODULE = {"mlflow": "mlflow", "wandb": "wandb"}


def check_tracker(to: str) -> None:
    """Refuses an unknown tracker, or one whose package is not installed, with the command that installs it.

    Raises:
        ConfigError: one line, what to do.
    """
    if to not in TRACKERS:
        raise ConfigError(f"unknown tracker {to!r}: use one of {', '.join(TRACKERS)}")
    try:
        __import__(_MODULE[to])
    except ImportError:
        raise ConfigError(f"{to} is not installed: pip install 'reasearch[trackers]' (or pip install "
                          f"'{PINS[to]}')") from None


class Sink(Protocol):
    """Where one run is logged (a tracker's run)."""

    location: str

    def log_params(self, params: Mapping[str, str]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_text(self, name: str, text: str) -> None: ...
    def set_summary(self, values: Mapping[str, float | str]) -> None: ...
    def finish(self, state: str) -> None: ...


class MlflowSink:
    """One MLflow run, written through ``MlflowClient`` (no global active run: fleets log several at once)."""

    def __init__(self, name: str, tags: Mapping[str, str], *, tracking_uri: str | None = None,
                 experiment: str | None = None) -> None:
        check_tracker("mlflow")
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "mlruns"
        if "://" not in uri and not uri.startswith("file:"):  # a local folder: MLflow's file store
            uri = Path(uri).resolve().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps it behind this switch
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        exp_name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "reasearch"
        exp = self.client.get_experiment_by_name(exp_name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(exp_name)
        self.run_id = self.client.create_run(exp_id, run_name=name, tags=dict(tags)).info.run_id
        self.location = f"mlflow {uri} experiment {exp_name!r} run {self.run_id}"

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in params.items()])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, step) for k, v in metrics.items()])

    def log_text(self, name: str, text: str) -> None:
        self.client.log_text(self.run_id, text, name)

    def set_summary(self, values: Mapping[str, float | str]) -> None:
        for k, v in values.items():
            if isinstance(v, str):
                self.client.set_tag(self.run_id, k, v)
            else:
                self.client.log_metric(self.run_id, k, v)

    def finish(self, state: str) -> None:
        status = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}.get(state, "FINISHED")
        self.client.set_terminated(self.run_id, status)


class WandbSink:
    """One W&B run (``reinit="create_new"``: fleets log several at once)."""

    _open = 0  # runs of this process not finished yet: the last one to finish stops W&B's service process

    def __init__(self, name: str, tags: Mapping[str, str], *, project: str | None = None) -> None:
        check_tracker("wandb")
        import wandb

        proj = project or os.environ.get("WANDB_PROJECT") or "reasearch"
        self.run = wandb.init(project=proj, name=name, tags=[f"{k}:{v}"[:64] for k, v in tags.items()],
                              reinit="create_new", settings=wandb.Settings(silent=True, console="off"))
        self.location = f"wandb project {proj!r} run {self.run.id} ({self.run.settings.mode}, {self.run.dir})"
        WandbSink._open += 1

    def log_params(self, params: Mapping[str, str]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_text(self, name: str, text: str) -> None:
        import wandb

        stem = name.rsplit(".", 1)[0].replace("_", "-")
        art = wandb.Artifact(f"{self.run.id}-{stem}", type=stem)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / name
            path.write_text(text, encoding="utf-8")
            art.add_file(str(path), name=name)
            self.run.log_artifact(art)
            if self.run.settings.mode == "online":  # the file goes away with the folder: upload it first
                art.wait()

    def set_summary(self, values: Mapping[str, float | str]) -> None:
        self.run.summary.update(dict(values))

    def finish(self, state: str) -> None:
        import wandb

        self.run.finish(exit_code=0 if state == "finished" else 1)
        WandbSink._open -= 1
        if WandbSink._open == 0:  # no child process outlives the export (W&B's service would)
            wandb.teardown()


def open_sink(to: str, name: str, tags: Mapping[str, str], **options: Any) -> Sink:
    """A new tracker run (``options``: ``tracking_uri``/``experiment`` for MLflow, ``project`` for W&B)."""
    check_tracker(to)
    if to == "mlflow":
        return MlflowSink(name, tags, tracking_uri=options.get("tracking_uri"), experiment=options.get("experiment"))
    return WandbSink(name, tags, project=options.get("project"))


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def interventions_of(events: Sequence[Any]) -> list[dict[str, Any]]:
    """The run's interventions in the order of the log, each ``{"step", "ts", "kind", ...its fields}``."""
    out: list[dict[str, Any]] = []
    for e in events:
        kind = base_kind(str(e.kind))
        if kind == INTERVENTION:
            out.append({"step": e.step, "ts": e.ts, "kind": str(e.kind), **dict(e.payload)})
        elif kind == APPLIED and e.step >= 0 and isinstance(e.payload.get("interventions"), list):
            out.extend({"step": e.step, "ts": e.ts, "kind": str(e.kind), **item}
                       for item in e.payload["interventions"] if isinstance(item, Mapping))
    return out


class RunSync:
    """Logs one run of the store to a tracker: what is new at each :meth:`sync`, the rest at :meth:`close`."""

    def __init__(self, run_id: str, open_: Callable[[str, Mapping[str, str]], Sink], *,
                 fleet: str = "", method: str = "") -> None:
        self.run_id = run_id
        self._open = open_
        self.fleet, self.method = fleet, method
        self.sink: Sink | None = None
        self.logged = 0  # evaluations logged
        self._best: float | None = None

    def sync(self, store: Store) -> int:
        """Logs the evaluations stored since the last call; returns how many."""
        view = load_run(store, self.run_id)
        if self.sink is None:
            rec = view.record
            config = rec.config if isinstance(rec.config, Mapping) else {}
            method = self.method or (str(config.get("method")) if config.get("driver") == "method" else "agent")
            tags = {"reasearch.run_id": rec.id, "reasearch.task_id": rec.task_id, "reasearch.method": method}
            self.sink = self._open(rec.id, tags)
            params = {"run_id": rec.id, "task_id": rec.task_id, "seed": str(rec.seed), "method": method,
                      "direction": view.direction, "fleet": self.fleet or "-",
                      "best_known": "-" if view.best_known is None else repr(view.best_known),
                      **{f"model.{k}": v for k, v in view.models.items()},
                      **{f"cap.{k}": f"{v:g}" for k, v in view.caps.items()},
                      **{f"task.{k}": json.dumps(v, default=str) for k, v in dict(rec.task_params).items()}}
            self.sink.log_params({k[:250]: cap_text(v, _PARAM_CHARS) for k, v in params.items()})
        steps = [int(i["step"]) for i in interventions_of(view.events)]
        new = view.points[self.logged:]
        for p in new:
            metrics: dict[str, float] = {"ok": 1.0 if p.score is not None else 0.0, "dollars": p.dollars,
                                         "tokens": p.tokens, "interventions": float(sum(s <= p.step for s in steps))}
            score = _finite(p.score)
            if score is not None:
                metrics["score"] = score
                if is_better(view.direction, score, self._best):
                    self._best = score
                norm = _finite(p.normalized)
                if norm is not None:
                    metrics["normalized_score"] = norm
            if self._best is not None:
                metrics["best_score"] = self._best
            self.sink.log_metrics(metrics, p.index)
        self.logged += len(new)
        return len(new)

    def close(self, store: Store) -> str:
        """The last sync, the summary (spend, best), the best candidate and the interventions; the tracker run
        ends. Returns where it went."""
        self.sync(store)
        view = load_run(store, self.run_id)
        assert self.sink is not None
        summary: dict[str, float | str] = {f"spent.{k}": float(v) for k, v in view.usage.items()}
        summary.update({"evaluations": float(len(view.evaluations)), "state": view.record.state.value})
        if view.best is not None and view.best.result.score is not None:
            summary["final_best_score"] = float(view.best.result.score)
            norm = _finite(view.best.result.normalized_score)
            if norm is not None:
                summary["final_normalized_score"] = norm
            cand = next((c for c in view.candidates if c.id == view.best.candidate_id), None)
            if cand is not None:
                summary["best_candidate"] = cand.id
                self.sink.log_text("best_candidate.txt", cand.source)
        interventions = interventions_of(view.events)
        summary["interventions_total"] = float(len(interventions))
        if interventions:
            self.sink.log_text("interventions.json", json.dumps(interventions, indent=1, default=str))
        self.sink.set_summary(summary)
        self.sink.finish(view.record.state.value)
        return self.sink.location


def export_run(store: Store, run_id: str, to: str, **options: Any) -> str:
    """Writes one stored run to ``to`` (``mlflow`` or ``wandb``); returns where it went.

    Raises:
        ConfigError: an unknown tracker, or its package missing.
        StoreError: no such run.
    """
    check_tracker(to)
    run_id = store.get_run(run_id).id
    sync = RunSync(run_id, lambda name, tags: open_sink(to, name, tags, **options))
    return sync.close(store)


class LiveTracking:
    """Follows runs of a store in a thread and logs them to a tracker as their evaluations land.

    ``runs(store)`` names the runs to follow, as ``(run id, fleet id, method)``, at each look (a fleet's
    members appear as they start). :meth:`stop` does the last look and closes every tracker run.
    """

    def __init__(self, store_url: str, to: str, runs: Callable[[Store], Sequence[tuple[str, str, str]]], *,
                 interval_s: float = 2.0, **options: Any) -> None:
        check_tracker(to)
        self.store_url, self.to, self.runs, self.interval_s, self.options = store_url, to, runs, interval_s, options
        self.syncs: dict[str, RunSync] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tracker", daemon=True)

    def start(self) -> LiveTracking:
        self._thread.start()
        return self

    def __enter__(self) -> LiveTracking:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _look(self, store: Store) -> None:
        for run_id, fleet, method in self.runs(store):
            if run_id not in self.syncs:
                self.syncs[run_id] = RunSync(run_id, lambda name, tags: open_sink(self.to, name, tags, **self.options),
                                             fleet=fleet, method=method)
            self.syncs[run_id].sync(store)

    def _loop(self) -> None:
        with open_store(self.store_url) as store:
            while not self._stop.wait(self.interval_s):
                try:
                    self._look(store)
                except Exception as exc:  # a tracker that fails must not stop the run; said at the end
                    if len(self.errors) < 10:  # hours of a failing tracker keep only the first few
                        self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> list[str]:
        """Stops following, logs what is left and ends every tracker run; returns where each went (a second call:
        nothing)."""
        if self._stop.is_set():
            return []
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with open_store(self.store_url) as store:
            self._look(store)
            return [s.close(store) for s in self.syncs.values()]
