"""OpenEvolve and ShinkaEvolve task folders, run unchanged.

Two published folder shapes are tasks here as they are (docs/your-own-task.md):

* **OpenEvolve**: ``initial_program.py`` (``EVOLVE-BLOCK-START``/``END`` comments mark what evolves),
  ``evaluator.py`` with ``evaluate(program_path)`` returning a dict of metrics or an ``EvaluationResult``, and
  optionally ``evaluate_stage1/2/3`` (its cascade) and ``config.yaml`` (``prompt.system_message`` is the
  description the optimizer reads; ``evaluator.cascade_evaluation``, ``evaluator.cascade_thresholds`` and
  ``evaluator.timeout`` are honoured). The score is ``combined_score``, else OpenEvolve's fallback: the average
  of the numeric metrics but ``error``.
* **ShinkaEvolve**: ``initial.py`` and ``evaluate.py`` with ``main(program_path, results_dir)``, which calls
  ``shinka.core.run_shinka_eval`` (or writes ``metrics.json`` and ``correct.json`` itself); optionally
  ``shinka.yaml`` (``evo.task_sys_msg`` is the description). The score is ``metrics["combined_score"]`` of a
  correct run.

Both peers maximize. :func:`peer_folder_kind` says whether a folder is one of them (the registry asks it before
reading a ``task.toml``).

Trust boundary: the folder's evaluator imports and runs the candidate, so it cannot run on the host: it runs in
the candidate's sandbox with the task's limits (harness :mod:`reasearch.evaluators._peer_harness`), and a
candidate can patch it there. Every result carries ``trust: "evaluator shares the candidate's jail"``: the score
is as trustworthy as that evaluator's own isolation (``reasearch convert-task`` writes the split form, in which
the candidate cannot touch its score). What comes back is hostile data: the sandbox caps its size, and only
finite numbers, short text and a bounded number of keys become a result. A failure (a raise, a timeout, a
missing or non-finite score, an ``error`` text, ``correct: false``) is never fitness.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import Limits, RunRequest, SandboxRunner
from reasearch.errors import ConfigError, TaskFolderError
from reasearch.evaluators.base import Task
from reasearch.evaluators.folder import _changes, _content_hash, folder_manifest
from reasearch.evaluators.params import Range, TaskParam
from reasearch.evaluators.result import EvalResult, Provenance
from reasearch.evaluators.spec import TaskSpec

__all__ = ["TRUST", "PeerFolderTask", "peer_folder_kind", "evolve_blocks", "keep_outside_blocks"]

TRUST = "evaluator shares the candidate's jail"
PeerKind = Literal["openevolve", "shinka"]
LAYOUTS: dict[str, tuple[str, str, str]] = {  # kind -> (program, evaluator, config)
    "openevolve": ("initial_program.py", "evaluator.py", "config.yaml"),
    "shinka": ("initial.py", "evaluate.py", "shinka.yaml"),
}
DEFAULT_TIME_S, MAX_TIME_S, MEMORY_MB = 60.0, 600.0, 2048
MAX_FILE_BYTES = 4 * 1024 * 1024  # top-level files carried into the jail with each evaluation
MAX_METRICS, MAX_FEEDBACK = 64, 2000
THRESHOLDS = (0.5, 0.75, 0.9)  # OpenEvolve's default cascade thresholds
START, END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
_TIME_PARAM = TaskParam("time_limit_s", (float,), DEFAULT_TIME_S, Range(gt=0, le=MAX_TIME_S),
                        "wall-time limit of one evaluation, the evaluator's own work included")


def peer_folder_kind(folder: str | Path) -> PeerKind | None:
    """``"openevolve"`` (initial_program.py + evaluator.py), ``"shinka"`` (initial.py + evaluate.py) or None."""
    p = Path(folder).expanduser()
    if (p / "task.toml").is_file():
        return None  # the split form of docs/your-own-task.md wins where a folder holds both
    for kind, (program, evaluator, _) in LAYOUTS.items():
        if (p / program).is_file() and (p / evaluator).is_file():
            return kind  # type: ignore[return-value]
    return None


def evolve_blocks(source: str) -> list[tuple[int, int]] | None:
    """The ``(start, end)`` character spans between each ``EVOLVE-BLOCK-START`` line and its ``END`` line; None
    when the markers are absent or unbalanced."""
    spans: list[tuple[int, int]] = []
    start = None
    pos = 0
    for line in source.splitlines(keepends=True):
        if START in line and start is None:
            start = pos + len(line)
        elif END in line and start is not None:
            spans.append((start, pos))
            start = None
        elif START in line or END in line:
            return None
        pos += len(line)
    return spans if spans and start is None else None


def keep_outside_blocks(parent: str, proposed: str) -> str | None:
    """``proposed``'s EVOLVE-BLOCK regions in ``parent``'s text outside them (OpenEvolve reverts edits outside the
    regions); ``proposed`` unchanged when ``parent`` has no markers; None when ``proposed`` lost or added regions."""
    old = evolve_blocks(parent)
    if old is None:
        return proposed
    new = evolve_blocks(proposed)
    if new is None or len(new) != len(old):
        return None
    out, pos = [], 0
    for (s, e), (ns, ne) in zip(old, new, strict=True):
        out.append(parent[pos:s])
        out.append(proposed[ns:ne])
        pos = e
    out.append(parent[pos:])
    return "".join(out)


def _functions(source: str) -> list[str]:
    try:
        tree = parse_locked(source)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        import yaml  # only where a peer's folder has a config file
    except ImportError:
        raise TaskFolderError(f"{path}: reading it needs PyYAML: pip install 'reasearch[peer-folders]' (or remove "
                              "the file)") from None

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", 0) + 1
        raise TaskFolderError(f"{path} line {line}: not valid YAML; fix it or remove the file") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TaskFolderError(f"{path} line 1: the config must be a mapping of sections, not {type(doc).__name__}")
    return doc


def _section(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name)
    return dict(value) if isinstance(value, dict) else {}


class PeerFolderTask(Task):
    """An OpenEvolve or ShinkaEvolve folder as a task (see the module docstring).

    Args:
        folder: the folder (OpenEvolve: ``initial_program.py`` + ``evaluator.py``; ShinkaEvolve: ``initial.py`` +
            ``evaluate.py``).
        content_hash: when given (a stored spec), the folder must still hash to it, or the task is refused.
        files: per-file hashes recorded with ``content_hash``, to name what changed.
        time_limit_s: the wall-time limit of one evaluation (evaluator included); default: OpenEvolve's
            ``evaluator.timeout`` of ``config.yaml``, else 60 s.
    """

    harness = "reasearch.evaluators._peer_harness:peer_harness"
    trust_note = TRUST

    def __init__(self, folder: str, content_hash: str = "", files: Mapping[str, str] | None = None,
                 time_limit_s: float | None = None) -> None:
        self.folder = folder
        self.content_hash = content_hash
        self.files = files
        self.time_limit_s = time_limit_s

    @property
    def path(self) -> Path:
        return Path(self.folder).expanduser().resolve()

    # ---------------------------------------------------------------- reading the folder
    def _loaded(self) -> dict[str, Any]:
        cached = self.__dict__.get("_state")
        if cached is not None:
            return dict(cached)
        folder = self.path
        kind = peer_folder_kind(folder)
        if kind is None:
            raise TaskFolderError(f"{self.folder}: not an OpenEvolve folder (initial_program.py + evaluator.py) or a "
                                  "ShinkaEvolve folder (initial.py + evaluate.py)")
        manifest = folder_manifest(folder)
        if self.content_hash and _content_hash(manifest) != self.content_hash:
            what = _changes(self.files or {}, manifest)
            raise TaskFolderError(f"{folder} changed since this run was stored ({what}); restore those files, or "
                                  "start a new run on the folder")
        program_name, evaluator_name, config_name = LAYOUTS[kind]
        seed = (folder / program_name).read_text(encoding="utf-8")
        evaluator = (folder / evaluator_name).read_text(encoding="utf-8")
        for name, text in ((program_name, seed), (evaluator_name, evaluator)):
            try:
                compile(text, str(folder / name), "exec")
            except SyntaxError as exc:
                raise TaskFolderError(f"{folder / name} line {exc.lineno}: syntax error: {exc.msg}; fix it") from None
        defined = _functions(evaluator)
        wanted, how = (("evaluate", "OpenEvolve calls evaluate(program_path)") if kind == "openevolve"
                       else ("main", "ShinkaEvolve calls main(program_path, results_dir)"))
        if wanted not in defined and not (kind == "openevolve" and "evaluate_stage1" in defined):
            raise TaskFolderError(f"{folder / evaluator_name} line 1: no function {wanted}(); {how}")
        functions = _functions(seed)
        if not functions:
            raise TaskFolderError(f"{folder / program_name} line 1: the program defines no function; define the one "
                                  f"{evaluator_name} calls")
        config = _read_yaml(folder / config_name)
        carried: dict[str, bytes] = {}
        total = 0
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink() and path.name != "candidate.py" \
                    and re.fullmatch(r"[A-Za-z0-9_.\-]+", path.name) and not path.name.endswith(".pyc"):
                data = path.read_bytes()
                total += len(data)
                if total > MAX_FILE_BYTES:
                    raise TaskFolderError(f"{folder}: its top-level files pass {MAX_FILE_BYTES >> 20} MB; each "
                                          "evaluation carries them into the sandbox, keep large data elsewhere")
                carried[path.name] = data
        cached = {"kind": kind, "manifest": manifest, "seed": seed, "config": config, "files": carried,
                  "functions": functions, "evaluator_name": evaluator_name, "program_name": program_name,
                  "preferred": _called_function(evaluator, functions)}
        self.__dict__["_state"] = cached
        return cached

    @property
    def kind(self) -> PeerKind:
        kind: PeerKind = self._loaded()["kind"]
        return kind

    def _timeout(self) -> float:
        if self.time_limit_s is not None:
            value = self.time_limit_s
            if not _TIME_PARAM.accepts(value) or not (_TIME_PARAM.range is not None and _TIME_PARAM.range.ok(value)):
                raise ConfigError(f"time_limit_s of {self.folder} takes a number > 0 and <= {MAX_TIME_S:g}, "
                                  f"not {value!r}")
            return float(value)
        return self._folder_timeout()

    def _folder_timeout(self) -> float:
        state = self._loaded()
        if state["kind"] == "openevolve":
            value = _section(state["config"], "evaluator").get("timeout")
        else:
            value = None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return float(min(value, MAX_TIME_S))
        return DEFAULT_TIME_S

    def _make_spec(self) -> TaskSpec:
        state = self._loaded()
        name = re.sub(r"[^a-z0-9_]", "_", self.path.name.lower()) or "task"
        functions = list(state["functions"])
        first = state["preferred"] or functions[0]
        aliases = tuple(f for f in functions if f != first)
        return TaskSpec(
            id=f"{state['kind']}_folder/{name}-v1", version=1, direction="maximize",
            time_limit_s=self._timeout(), memory_mb=MEMORY_MB, entry_point=first, entry_aliases=aliases,
            deterministic=False,  # peers' evaluators time their runs and draw random tests
            params={"folder": str(self.path), "content_hash": _content_hash(state["manifest"]),
                    "files": state["manifest"], **({"time_limit_s": float(self.time_limit_s)}
                                                   if self.time_limit_s is not None else {})},
            task_class=f"{PeerFolderTask.__module__}:{PeerFolderTask.__qualname__}",
        )

    def get_params(self) -> dict[str, Any]:
        return dict(self.spec.params)

    def declared_params(self) -> list[TaskParam]:
        """A peer's folder has one parameter, its time limit (``reasearch tasks PATH --params``)."""
        return [dataclasses.replace(_TIME_PARAM, default=self._folder_timeout())]

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.spec.params)  # a copy elsewhere (a Ray worker) refuses a folder that differs

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]  # every attribute set, the folder re-read (and checked) on use

    def provenance(self, candidate_source: str, *, seed: int | None, sandbox_mode: str) -> Provenance:
        prov = super().provenance(candidate_source, seed=seed, sandbox_mode=sandbox_mode)
        return dataclasses.replace(prov, params={k: v for k, v in prov.params.items() if k != "files"})

    def evaluator_hash(self) -> str:
        extended = super().evaluator_hash() + str(self.spec.params["content_hash"])
        return hashlib.sha256(extended.encode()).hexdigest()[:16]

    # ---------------------------------------------------------------- what the optimizer reads
    def describe(self) -> str:
        state = self._loaded()
        config = state["config"]
        if state["kind"] == "openevolve":
            text = _section(config, "prompt").get("system_message")
        else:
            text = _section(config, "evo").get("task_sys_msg")
        if not isinstance(text, str) or not text.strip():
            doc = ast.get_docstring(parse_locked(state["seed"])) or ""
            text = doc or (f"Improve the program {state['program_name']} so that {state['evaluator_name']} "
                           "scores it higher.")
        peer = "OpenEvolve" if state["kind"] == "openevolve" else "ShinkaEvolve"
        lines = [text.strip(), "", "## How the candidate is evaluated",
                 f"This is {peer}'s task folder format, run unchanged: the candidate is the whole program "
                 f"({state['program_name']}); the folder's {state['evaluator_name']} imports it and scores it, "
                 f"higher is better (combined_score). Keep `{self.spec.entry_point}()`: the evaluator calls it.",
                 "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END comments; keep the rest as it is."
                 if evolve_blocks(state["seed"]) else "",
                 f"Limits: {self.spec.time_limit_s:g} s wall time, {self.spec.memory_mb} MB memory per evaluation "
                 "(the evaluator's own work included).",
                 f"Trust: the {peer} evaluator runs in the candidate's sandbox ({TRUST})."]
        return "\n".join(line for line in lines if line is not None) + "\n"

    def seed_program(self) -> str:
        return str(self._loaded()["seed"])

    def constrain(self, parent: str, proposed: str) -> str | None:
        """What a method may evaluate of a proposal: only its EVOLVE-BLOCK regions change (as OpenEvolve does)."""
        return keep_outside_blocks(parent, proposed)

    # ---------------------------------------------------------------- evaluation
    def payload(self, seed: int | None) -> dict[str, Any]:
        state = self._loaded()
        evaluator = _section(state["config"], "evaluator")
        cascade = evaluator.get("cascade_evaluation", True)
        thresholds = evaluator.get("cascade_thresholds", list(THRESHOLDS))
        if not isinstance(thresholds, list) or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in thresholds):
            thresholds = list(THRESHOLDS)
        return {"kind": state["kind"], "evaluator": state["evaluator_name"], "cascade": cascade is not False,
                "thresholds": [float(t) for t in thresholds], "seed": seed}

    def limits(self) -> Limits:
        return Limits(wall_s=self.spec.time_limit_s, memory_mb=self.spec.memory_mb, nproc=64,
                      result_bytes=1024 * 1024)

    def build_request(self, candidate_source: str, *, seed: int | None = None) -> RunRequest:
        request = super().build_request(candidate_source, seed=seed)
        return dataclasses.replace(request, files=dict(self._loaded()["files"]))

    def preflight(self, *, executor: SandboxRunner | None = None, seed: int = 0) -> EvalResult:
        """Evaluates the folder's own initial program: one that fails is a :class:`TaskFolderError` (one line naming
        the files), before any run is stored."""
        result = self.evaluate(self.seed_program(), seed=seed, executor=executor)
        if not result.ok:
            state = self._loaded()
            why = " ".join(result.feedback.split())[:300] or "no detail"
            raise TaskFolderError(f"{self.path / state['program_name']} line 1: the initial program fails its own "
                                  f"{state['evaluator_name']} ({result.status.value}: {why}); fix either file "
                                  f"(`reasearch eval {self.folder} {self.path / state['program_name']}` shows all)")
        return result

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Reads back what the evaluator returned (hostile: checked here); a failure is INVALID with its reason."""
        kind = self.kind
        base = {"trust": TRUST}
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
            return self.invalid("the evaluator returned no metrics", metrics=base)
        raw: dict[str, Any] = data["metrics"]
        metrics: dict[str, Any] = dict(base)
        for key, value in list(raw.items())[:MAX_METRICS]:
            if key == "trust":
                continue  # the harness's word on trust is the trusted side's, never the evaluator's
            if isinstance(value, (int, float)) and (isinstance(value, bool) or math.isfinite(value)):
                metrics[f"peer.{key}"[:100]] = value
        ran = data.get("ran")
        if isinstance(ran, str):
            metrics["peer.ran"] = ran[:100]
        feedback = _text(raw.get("text_feedback")) if kind == "shinka" else _artifact_text(data.get("artifacts"))
        if kind == "shinka" and data.get("correct") is not True:
            why = _text(data.get("error")) or "correct.json says the program is not correct"
            return self.invalid(f"evaluate.py: {why}", metrics=metrics)
        error = raw.get("error")
        if isinstance(error, str) and error.strip():
            return self.invalid(f"{self._loaded()['evaluator_name']}: {_text(error)}", metrics=metrics)
        if raw.get("timeout") is True:
            return self.invalid(f"{self._loaded()['evaluator_name']} reports a timeout", metrics=metrics)
        score = raw.get("combined_score")
        if kind == "openevolve" and "combined_score" not in raw:
            values = [float(v) for k, v in raw.items()  # OpenEvolve's average skips flags and NaN
                      if k != "error" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            score = sum(values) / len(values) if values else None
            metrics["peer.score_from"] = "average of the numeric metrics (no combined_score)"
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            return self.invalid(f"the evaluator gave no finite combined_score (got {_text(repr(score))[:80]})",
                                metrics=metrics)
        return self.result(float(score), metrics=metrics, feedback=feedback)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return value if len(value) <= MAX_FEEDBACK else value[:MAX_FEEDBACK] + " ...(cut)"


def _artifact_text(artifacts: Any) -> str:
    if not isinstance(artifacts, dict):
        return ""
    parts = [f"{k}: {v}" for k, v in list(artifacts.items())[:16] if isinstance(v, (str, int, float))]
    return _text("\n".join(parts))


def _called_function(evaluator: str, functions: list[str]) -> str | None:
    """The program function the evaluator names (``program.run_search``), when it names one of them."""
    try:
        tree = parse_locked(evaluator)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in functions:
            return node.attr
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in functions:
            return node.value
    return None
