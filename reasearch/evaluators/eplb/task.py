"""``EplbTask`` (``eplb/v1``): place MoE experts on GPU slots; balance on the next window, and be fast.

What is here: the task's configuration and score (its variants, the per-window tally, the summary and
feedback), its trace and its description. The evaluate session (setup, warm-up, the timed calls, the
calibration replays) and its CPU accounting live in :mod:`reasearch.evaluators.eplb.session`; how the
timing figures are read, in :mod:`reasearch.evaluators.eplb._timing`.

Trust boundary: trusted side only (never in the jail's code copy). A candidate's answers arrive as
untrusted data; each placement is validated and scored here, after the candidate's session is closed.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, ClassVar

import numpy as np

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import RunRequest, SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators._secret import derive_seed, fingerprint, secret
from reasearch.evaluators.base import Task, _hash_modules, default_runner, failure_feedback
from reasearch.evaluators.eplb._timing import CALIBRATION_SOURCE, CLOCK, decide
from reasearch.evaluators.eplb.harness import compact
from reasearch.evaluators.eplb.scoring import (
    WindowScore,
    parse_placement,
    window_balance,
)
from reasearch.evaluators.eplb.session import (
    WARM_ECHOES,  # noqa: F401  # re-exported: it was defined here
    calibrate,
    descendants_cpu,
    run_candidate,
    timing_metrics,
)
from reasearch.evaluators.eplb.workload import SyntheticWorkload, load_workload_windows
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta, spec_params
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec
from reasearch.native.eplb import validate_layout

__all__ = [
    "DEFAULT_SYNTHETIC_WINDOWS",
    "NUM_GPUS",
    "NUM_GROUPS",
    "NUM_NODES",
    "NUM_REPLICAS",
    "SPEED_NUMERATOR_S",
    "SCORE_VARIANTS",
    "EplbParams",
    "EplbTask",
    "adrs_leaderboard_score",
    "candidate_uses_torch",
]

# The configuration of TASKS.md: 288 physical slots, 8 expert groups, 4 nodes, 32 GPUs (9 slots each).
NUM_REPLICAS, NUM_GROUPS, NUM_NODES, NUM_GPUS = 288, 8, 4, 32
DEFAULT_SYNTHETIC_WINDOWS = 11  # 10 timed rebalances, each scored on the window after it (<= 0.5 s)
SPEED_NUMERATOR_S = 0.002  # combined = (mean bal_expert + 0.002 s / mean t_alg) / 2, as in the paper
_WEIGHT_TYPES = ("auto", "numpy", "torch")
SCORE_VARIANTS: dict[str, str] = {
    "combined": "(mean bal_expert + 0.002 / mean t_alg) / 2: the ADRS paper's EPLB score, as in skydiscover's "
                "benchmarks/ADRS/eplb evaluator (default)",
    "adrs": "90 * mean bal_gpu + 5 * min(0.002 / mean t_alg, 2) - (min(20 * mean t_alg, 20) if mean t_alg > "
            "10 ms else 0): UCB-ADRS/ADRS-Leaderboard problems/eplb/evaluator.py (0..100)",
    "bal_gpu": "mean bal_gpu alone (time-independent)",
    "bal_expert": "mean bal_expert alone (time-independent)",
}
"""Named scores (``-p score=NAME``), all computed here from the trusted figures, each with its source."""


def adrs_leaderboard_score(bal_gpu: float, t_alg_s: float) -> float:
    """The ADRS leaderboard's EPLB score: balance out of 90, speed out of 10, minus a penalty past 10 ms.

    Source: repository UCB-ADRS/ADRS-Leaderboard, ``problems/eplb/evaluator.py`` (read for the formula).
    """
    speed = 5.0 * min(SPEED_NUMERATOR_S / t_alg_s, 2.0) if t_alg_s > 0 else 10.0
    penalty = min(t_alg_s * 20.0, 20.0) if t_alg_s > 0.01 else 0.0
    return 90.0 * bal_gpu + speed - penalty


def candidate_uses_torch(source: str) -> bool:
    """True when the source imports torch (``import torch``, ``from torch... import``), anywhere in it.

    Such candidates get ``weight`` as a torch tensor (published programs call ``weight.float()``);
    the others get a NumPy array, and the sandbox never pays for torch's import. Unparsable source
    gives False (the sandbox reports the syntax error).
    """
    try:
        tree = parse_locked(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "torch" or a.name.startswith("torch.") for a in node.names):
            return True
        if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and (node.module == "torch" or node.module.startswith("torch."))):
            return True
    return False


@dataclass
class _Tally:
    """Per-window scores and trusted times, accumulated as the placements arrive."""

    windows: np.ndarray
    scores: list[WindowScore] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    gpu_loads: list[dict[str, Any]] = field(default_factory=list)  # per window, its worst layer (reports)

    def add(self, index: int, answer: Any, t_alg: float | None = None) -> str | None:
        """Validates and scores the placement made on window ``index``; returns why it is invalid, if so.

        ``t_alg`` (trusted seconds) is recorded with it when given; the sandbox path sets the times
        after its calibration instead.
        """
        L, E = self.windows.shape[1:]
        placement = parse_placement(answer, num_layers=L, num_experts=E, num_replicas=NUM_REPLICAS,
                                    next_load=self.windows[index + 1])
        if isinstance(placement, str):
            return f"rebalance on window {index} (scored on window {index + 1}): {placement}"
        score = window_balance(placement, self.windows[index + 1], NUM_GPUS)
        self.scores.append(score)
        if t_alg is not None:
            self.times.append(float(t_alg))
        self.gpu_loads.append(_gpu_loads(placement.phy2log[score.worst_layer], placement.logcnt[score.worst_layer],
                                         self.windows[index + 1, score.worst_layer], score.worst_layer))
        return None


def _gpu_loads(phy2log: np.ndarray, logcnt: np.ndarray, load: np.ndarray, layer: int) -> dict[str, Any]:
    """Per-GPU load of one layer without rebalancing (expert e on GPU e * G // E, one replica each) and
    under the candidate's placement: what a report draws as "before / after"."""
    load = np.asarray(load, dtype=np.float64)
    before = np.bincount(np.arange(load.size) * NUM_GPUS // load.size, weights=load, minlength=NUM_GPUS)
    slot = load[phy2log] / logcnt[phy2log]
    after = slot.reshape(NUM_GPUS, -1).sum(axis=1)
    return {"layer": int(layer), "before": [float(x) for x in before], "after": [float(x) for x in after]}


@dataclass(frozen=True, slots=True)
class EplbParams(TaskParams):
    """The parameters of ``eplb/v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "eplb"

    trace_path: str | None = field(default=None, kw_only=True, metadata=meta(
        'a published load trace ({"load_history": [{"logical_expert_load": [[E] x L]}]}); None uses the synthetic '
        "trace. Parsed once per process."))
    num_windows: int | None = field(default=None, kw_only=True, metadata=meta(
        "windows used (the first ones); None: 11 synthetic windows, or all of a file's.", Range(ge=2)))
    trace_seed: int = field(default=0, kw_only=True, metadata=meta(
        "public seed of the synthetic trace when evaluate gets no seed (a seed passed to evaluate selects the "
        "synthetic trace instead; ignored for a trace file). The generator's own seed is derived from it with the "
        "evaluator's secret (reasearch.evaluators._secret), so knowing it and the generator does not reveal the "
        "scored windows; results record the secret's fingerprint as trace_secret."))
    window_size: int = field(default=100, kw_only=True, metadata=meta(
        "history entries summed per window.", Range(ge=1)))
    weight_type: str = field(default="auto", kw_only=True, metadata=meta(
        '"auto" (default: a torch tensor iff the candidate imports torch), "numpy" or "torch".',
        Range(choices=_WEIGHT_TYPES)))
    time_limit_s: float = field(default=60.0, kw_only=True, metadata=meta(
        "wall-time limit of a whole evaluation (all calls together)."))
    memory_mb: int = field(default=4096, kw_only=True, metadata=meta("address-space limit of the candidate process."))
    score: str = field(default="combined", kw_only=True, metadata=meta(
        'the score variant (a key of SCORE_VARIANTS; default "combined").', Range(choices=tuple(SCORE_VARIANTS))))


class EplbTask(Parametrized[EplbParams], Task):
    """Expert-parallel load balancing (EPLB) for a DeepSeek-V3-shaped MoE model.

    The candidate's ``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)``
    receives one window of expert loads (``[L, E]`` int64: a torch tensor when the candidate imports
    torch, as every published program does, else a NumPy array) and returns ``(phy2log [L, R], log2phy [L, E, K], \
logcnt [L, E])``.
    It runs in one sandbox session per evaluation, one timed call per window; the placement made on
    window ``i`` is scored on window ``i + 1``, which the candidate never sees.

    Score (maximize, default ``score="combined"``): ``(mean bal_expert + 0.002 / mean t_alg) / 2``,
    where ``t_alg`` is the time of the algorithm alone, without the sandbox transport: the sandbox's
    clock around the call, bounded by the parent's round trip less the call's transport, replayed in a
    session of the evaluator's own after the candidate's (see ``reasearch.evaluators.eplb._timing``).
    ``bal_expert``, ``bal_gpu``, ``t_alg`` and every score variant (:data:`SCORE_VARIANTS`) are reported
    separately. Any broken rule is ``INVALID`` with the window, layer and reason.

    torch is imported in the sandbox only for candidates that import it (once, before the timed
    calls), and seeded with ``random`` and ``numpy.random`` from the evaluation seed.

    What the speed term counts: only the calls, timed as above. Work the candidate does outside its
    calls (at import, or in threads that run on after a call returns) is not in ``t_alg``; it is bounded
    by the one wall-time limit of the whole session and the memory limit; the session's total CPU time
    is reported as ``cpu_s``, and the part of it beyond the timed calls' ``t_alg`` as
    ``metrics["cpu_beyond_calls_s"]`` (not scored). It cannot see the window it is scored on earlier
    than any other candidate: window ``i + 1`` enters the sandbox only with call ``i + 1``.

    The score is timed, hence ``deterministic=False`` and no recorded ``seed_score``: the speed term
    ``0.002 / t_alg`` of the seed program moves by tens of percent with machine load (no tolerance
    would be both safe and meaningful), so ``check_task`` checks that the seed runs ``OK``, and the
    tests pin its time-independent balance figures against the published algorithm instead.

    Parameters: :class:`EplbParams`.
    """

    harness = "reasearch.evaluators.eplb.harness:rebalance"

    # ------------------------------------------------------------------------------------ spec

    def _make_spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            id="eplb/v1",
            version=1,
            direction="maximize",
            time_limit_s=p.time_limit_s,
            memory_mb=p.memory_mb,
            best_known=None,
            entry_point="rebalance_experts",
            deterministic=False,
            seed_score=None,
            params=spec_params(p),
        )

    def describe(self) -> str:
        source = (f"the load trace {self.params.trace_path}" if self.params.trace_path else
                  "a synthetic DeepSeek-V3-shaped trace (58 MoE layers x 256 experts, heavy-tailed expert "
                  "popularity with slow drift and per-batch noise)")
        kind = {"torch": "a torch.int64 tensor", "numpy": "a NumPy int64 array"}.get(
            self.params.weight_type, "a torch.int64 tensor if your program imports torch, else a NumPy int64 array")
        return (
            "Expert-parallel load balancing (EPLB) for a mixture-of-experts model.\n"
            "Define `rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)` returning "
            "`(phy2log, log2phy, logcnt)`:\n"
            f"- `weight`: [L, E] tokens routed to each logical expert in each layer ({kind}), summed over "
            f"a window of {self.params.window_size} batches;\n"
            f"- called with num_replicas={NUM_REPLICAS} physical slots per layer, num_groups={NUM_GROUPS}, "
            f"num_nodes={NUM_NODES}, num_gpus={NUM_GPUS} (GPU g holds slots "
            f"{NUM_REPLICAS // NUM_GPUS}*g .. {NUM_REPLICAS // NUM_GPUS}*g+{NUM_REPLICAS // NUM_GPUS - 1});\n"
            "- `phy2log` [L, R]: the logical expert in each slot; `logcnt` [L, E]: replicas per expert "
            "(>= 0, each layer sums to R, equal to the slot counts in phy2log); `log2phy` [L, E, K]: the "
            "slots of each expert's replicas, -1 padded, K >= max(logcnt). Integer NumPy arrays or torch "
            "tensors.\n"
            f"Data: {source}. Your function is called once per window, in order, in one process (state may "
            "be kept between calls); the placement made on window i is scored on window i+1, which you never "
            "see. Every expert with load in window i+1 must have a replica.\n"
            "Balance: each expert's load is split evenly over its replicas; bal_expert = sum over layers of "
            "mean slot load / sum of max slot load; bal_gpu the same over per-GPU sums.\n"
            f"Score (maximize): {self._score_text()}, where t_alg is the time of your function alone: the "
            "sandbox's clock around each call, bounded by the evaluator's own round trip less that call's "
            "transport, which it replays after your session (t_transport_per_window_s); the transport is not "
            "counted, and times under 4x the noise allowance count as that floor (t_alg_floor_s) unless the "
            "CPU time your process spent in the call (the kernel's account, cpu_per_window_s) vouches for less; "
            "a raise above your claim is capped by that CPU beyond it (plus what processes you fork use). "
            "Only the calls are timed: work done between calls (at import or in background threads) is not in "
            "t_alg, but it shares the one wall-time limit of the whole session and cannot see a window before "
            "it is sent. bal_expert, bal_gpu, t_alg and every score variant are reported separately. `random`, "
            "`numpy.random` (and torch) are seeded before the first call.\n"
            "The seed program is DeepSeek's published hierarchical algorithm; its compiled steps are "
            "importable: `from reasearch.native.eplb import balanced_packing, replicate_experts, "
            "rebalance_experts`.\n"
            f"Limits: {self.params.time_limit_s:g} s wall time for all calls together, {self.params.memory_mb} MB "
            "memory; NumPy, SciPy and numba are available, no network."
        )

    def seed_program(self) -> str:
        return resources.files(__package__).joinpath("seed.py.txt").read_text(encoding="utf-8")

    def evaluator_hash(self) -> str:
        """The base hash (this module and the harness), with the evaluate session's module folded in."""
        session = _hash_modules(("reasearch.evaluators.eplb.session",))
        return hashlib.sha256((super().evaluator_hash() + session).encode()).hexdigest()[:16]

    # -------------------------------------------------------------------------------- workload

    def workload_windows(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """The ``[W, L, E]`` windows this evaluation uses, and what they are (recorded in the metrics).

        Raises:
            ConfigError: the workload cannot hold the configuration, or has fewer than two windows.
        """
        if self.params.trace_path:
            windows = load_workload_windows(self.params.trace_path, int(self.params.window_size))
            if self.params.num_windows is not None:
                windows = windows[: int(self.params.num_windows)]
            info: dict[str, Any] = {"trace": str(self.params.trace_path), "trace_seed": None, "trace_secret": None}
        else:
            # The generator is public and its code could be pasted into a candidate, so the public seed only
            # names the trace: the generator's seed is derived from it with the evaluator's secret.
            trace_seed = int(self.params.trace_seed if seed is None else seed)
            public = SyntheticWorkload(seed=0, window_size=int(self.params.window_size)).to_dict()
            public.pop("seed")
            key = secret()
            # (the derivation's label is part of the seed: it keeps its old wording so scores do not move)
            derived = derive_seed("eplb/v1 synthetic trace", {**public, "seed": trace_seed}, key)
            workload = SyntheticWorkload(seed=derived, window_size=int(self.params.window_size))
            windows = workload.windows(int(self.params.num_windows or DEFAULT_SYNTHETIC_WINDOWS))
            info = {"trace": "synthetic", "trace_seed": trace_seed, "trace_params": public,
                    "trace_secret": fingerprint(key)}
        if windows.shape[0] < 2:
            raise ConfigError(f"the workload has {windows.shape[0]} window(s) of {self.params.window_size} entries; "
                              "at least 2 are needed (one to place on, one to score on)")
        validate_layout(int(windows.shape[2]), NUM_REPLICAS, NUM_GROUPS, NUM_NODES, NUM_GPUS)
        info.update(num_layers=int(windows.shape[1]), num_experts=int(windows.shape[2]),
                    num_windows=int(windows.shape[0]), window_size=int(self.params.window_size))
        return windows, info

    def _score_text(self) -> str:
        if self.params.score == "combined":
            return f"(mean bal_expert + {SPEED_NUMERATOR_S} / mean t_alg) / 2"
        return f"score variant {self.params.score!r}: {SCORE_VARIANTS[self.params.score]}"

    def resolved_weight_type(self, candidate_source: str) -> str:
        """``"torch"`` or ``"numpy"``: what ``weight`` is for this candidate (``"auto"`` reads its imports)."""
        if self.params.weight_type == "auto":
            return "torch" if candidate_uses_torch(candidate_source) else "numpy"
        return self.params.weight_type

    def _call_payload(self, weight: np.ndarray, weight_type: str | None = None) -> dict[str, Any]:
        wt = weight_type or ("numpy" if self.params.weight_type == "auto" else self.params.weight_type)
        return {
            "weight": compact(weight),
            "num_replicas": NUM_REPLICAS,
            "num_groups": NUM_GROUPS,
            "num_nodes": NUM_NODES,
            "num_gpus": NUM_GPUS,
            "weight_type": wt,
        }

    # ------------------------------------------------------------------------------ evaluation

    def evaluate(
        self,
        candidate_source: str,
        *,
        seed: int | None = None,
        executor: SandboxRunner | None = None,
    ) -> EvalResult:
        """Runs the candidate once per window in one sandbox session, timing each call; scores the results.

        In order: one untimed setup call (allocator settings; imports torch for a torch candidate, seeds
        the generators), a few untimed warm-up echoes, one timed call per window back to back, then,
        when every placement is valid, a calibration session of the evaluator's own replays each call to
        measure the transport that the timing leaves out (``_timing``).

        Args:
            candidate_source: the candidate program's source text.
            seed: selects the synthetic trace (default: the task's ``trace_seed``) and seeds the
                sandbox's generators; recorded in provenance.
            executor: a sandbox runner; default: the process-wide warm pool.
        """
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        windows, info = self.workload_windows(seed)
        runner = executor if executor is not None else default_runner()
        weight_type = self.resolved_weight_type(candidate_source)
        info = {**info, "weight_type": weight_type}
        deadline = time.perf_counter() + float(self.params.time_limit_s)
        ran = run_candidate(runner, self.build_request(candidate_source, seed=seed), windows,
                            lambda w: self._call_payload(w, weight_type), num_replicas=NUM_REPLICAS, seed=seed,
                            weight_type=weight_type, deadline=deadline, time_limit_s=float(self.params.time_limit_s))
        final, problem = ran.final, ran.problem
        prov = self.provenance(candidate_source, seed=seed, sandbox_mode=final.sandbox_mode)
        if info.get("trace_secret"):  # which secret scored it (its fingerprint): reproducible where it is kept
            prov = dataclasses.replace(prov, versions={**prov.versions, "trace_secret": info["trace_secret"]})
        if problem is None and final.status is not Status.OK:
            problem = (final.status, failure_feedback(final))
        tally = _Tally(windows)
        if problem is None:  # scored after the session: no work of ours between the timed calls
            for i, answer in enumerate(ran.answers):
                reason = tally.add(i, answer)
                if reason is not None:
                    problem = (Status.INVALID, reason)
                    break
        if problem is not None:
            status, text = problem
            if status is not Status.INVALID and final.stderr.strip():
                text += "\nstderr (tail):\n" + final.stderr[-2000:]
            return EvalResult.failure(status, text, wall_s=final.wall_s, cpu_s=final.cpu_s,
                                      metrics={**info, "windows_scored": len(tally.scores)}, provenance=prov)
        calibration = RunRequest(source=CALIBRATION_SOURCE, entry=self.spec.entries, harness=self.harness,
                                 payload={}, limits=self.limits())
        echoes, overheads, per_round_trip_cpu = calibrate(runner, calibration, windows, ran.answers, ran.calls,
                                                          lambda w: self._call_payload(w, "numpy"), NUM_REPLICAS)
        cpu_bound = None
        if per_round_trip_cpu is not None:  # less our own CPU per round trip, for the calls only (never more)
            cpu_bound = float(final.cpu_s) - per_round_trip_cpu * len(ran.calls)
        descendants = descendants_cpu(final, ran.accounted)
        verdict = decide(ran.calls, echoes, cpu_bound, overheads, descendants)
        tally.times.extend(verdict.t_alg)
        timing = timing_metrics(verdict, ran.calls, cpu_bound, descendants)
        result = self._summarize(tally, {**info, **timing})
        # Not scored; shown so that work moved out of the calls (at import, between calls, in threads) is
        # visible: session CPU beyond the timed calls' algorithm time.
        beyond = max(0.0, float(final.cpu_s) - sum(tally.times))
        return result.with_(wall_s=final.wall_s, cpu_s=final.cpu_s, provenance=prov,
                            metrics={**result.metrics, "cpu_beyond_calls_s": beyond})

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores raw data: ``{"placements": [answer per window], "t_alg_s": [trusted seconds per call]}``.

        ``placements[i]`` (``{"phy2log", "log2phy", "logcnt"}``) is the placement made on window ``i`` of
        this task's trace; there must be one for every window but the last.
        """
        if not isinstance(data, Mapping) or "placements" not in data or "t_alg_s" not in data:
            return self.invalid("expected {'placements': [...], 't_alg_s': [...]}, one of each per window")
        placements, times = data["placements"], data["t_alg_s"]
        windows, info = self.workload_windows(seed)
        need = windows.shape[0] - 1
        if not isinstance(placements, Sequence) or not isinstance(times, Sequence):
            return self.invalid("placements and t_alg_s must be lists")
        if len(placements) != need or len(times) != need:
            return self.invalid(f"expected {need} placements and {need} times (one per window but the last), "
                                f"got {len(placements)} and {len(times)}")
        tally = _Tally(windows)
        for i, (answer, t) in enumerate(zip(placements, times, strict=True)):
            if not isinstance(t, (int, float)) or not np.isfinite(t) or t <= 0:
                return self.invalid(f"t_alg_s[{i}] must be a positive number of seconds, got {t!r}")
            reason = tally.add(i, answer, float(t))
            if reason is not None:
                return self.invalid(reason, metrics={**info, "windows_scored": len(tally.scores)})
        return self._summarize(tally, info)

    def _summarize(self, tally: _Tally, info: Mapping[str, Any]) -> EvalResult:
        bal_expert = statistics.fmean(s.bal_expert for s in tally.scores)
        bal_gpu = statistics.fmean(s.bal_gpu for s in tally.scores)
        t_alg = statistics.fmean(tally.times)
        speed = SPEED_NUMERATOR_S / t_alg
        combined = (bal_expert + speed) / 2.0
        variants = {"combined": combined, "adrs": adrs_leaderboard_score(bal_gpu, t_alg), "bal_gpu": bal_gpu,
                    "bal_expert": bal_expert}
        worst = min(range(len(tally.scores)), key=lambda i: tally.scores[i].bal_gpu)
        ws = tally.scores[worst]
        solution = {"worst_window": worst, **tally.gpu_loads[worst]}  # the worst window's worst layer, per GPU
        metrics: dict[str, Any] = {
            "combined": combined,
            "bal_expert": bal_expert,
            "bal_gpu": bal_gpu,
            "t_alg_s": t_alg,
            "speed_score": speed,
            "t_alg_median_s": statistics.median(tally.times),
            "t_alg_max_s": max(tally.times),
            "windows_scored": len(tally.scores),
            "bal_expert_per_window": [s.bal_expert for s in tally.scores],
            "bal_gpu_per_window": [s.bal_gpu for s in tally.scores],
            "t_alg_per_window_s": list(tally.times),
            "score_variant": self.params.score,
            "adrs_score": variants["adrs"],
            **info,
        }
        transport = info.get("t_transport_s")
        call = info.get("t_call_s")
        source = str(info.get("t_alg_source", ""))
        if source.startswith("round trip"):
            transport_text = f" t_alg is each call's {source}: the sandbox transport is included this time."
        elif source != CLOCK:
            transport_text = f" t_alg: {source}."
        elif transport is not None and call is not None:
            transport_text = (f" Transport left out: ~{transport * 1e3:.3f} ms per call (round trip with it: "
                              f"{call * 1e3:.3f} ms).")
        else:
            transport_text = ""
        score = self.params.score
        variant_text = "" if score == "combined" else (
            f"\nScore variant {score!r} = {variants[score]:.6g} ({SCORE_VARIANTS[score]}).")
        feedback = (
            f"{len(tally.scores)} rebalances, each scored on the next window. "
            f"combined = (bal_expert {bal_expert:.4f} + {SPEED_NUMERATOR_S} / t_alg {t_alg * 1e3:.3f} ms) / 2 "
            f"= ({bal_expert:.4f} + {speed:.4f}) / 2 = {combined:.4f}.\n"
            f"bal_gpu {bal_gpu:.4f} (mean over windows); t_alg median {statistics.median(tally.times) * 1e3:.3f} "
            f"ms, max {max(tally.times) * 1e3:.3f} ms.{transport_text}\n"
            f"Worst window for GPU balance: window {worst} -> {worst + 1}, bal_gpu {ws.bal_gpu:.4f}, bal_expert "
            f"{ws.bal_expert:.4f}; its worst layer is {ws.worst_layer} (bal_gpu {ws.worst_layer_bal_gpu:.4f})."
            + variant_text
        )
        return self.result(variants[self.params.score], metrics=metrics, feedback=feedback, solution=solution)
