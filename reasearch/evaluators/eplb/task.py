"""``EplbTask`` (``eplb/v1``): place MoE experts on GPU slots; balance on the next window, and be fast."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from reasearch.errors import ConfigError
from reasearch.evaluators._secret import derive_seed, fingerprint, secret
from reasearch.evaluators.base import Task, default_runner, failure_feedback
from reasearch.evaluators.eplb.harness import compact
from reasearch.evaluators.eplb.scoring import (
    WindowScore,
    parse_placement,
    window_balance,
)
from reasearch.evaluators.eplb.trace import SyntheticTrace, load_trace_windows
from reasearch.engine.protocol import SandboxRunner
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
    "EplbTask",
]

# The configuration of TASKS.md: 288 physical slots, 8 expert groups, 4 nodes, 32 GPUs (9 slots each).
NUM_REPLICAS, NUM_GROUPS, NUM_NODES, NUM_GPUS = 288, 8, 4, 32
DEFAULT_SYNTHETIC_WINDOWS = 11  # 10 timed rebalances, each scored on the window after it (<= 0.5 s)
SPEED_NUMERATOR_S = 0.002  # combined = (mean bal_expert + 0.002 s / mean t_alg) / 2, as in the paper
_WEIGHT_TYPES = ("numpy", "torch")
_PINGS = 3


@dataclass
class _Tally:
    """Per-window scores and trusted times, accumulated as the placements arrive."""

    windows: np.ndarray
    scores: list[WindowScore] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def add(self, index: int, answer: Any, t_alg: float) -> str | None:
        """Validates and scores the placement made on window ``index``; returns why it is invalid, if so."""
        L, E = self.windows.shape[1:]
        placement = parse_placement(answer, num_layers=L, num_experts=E, num_replicas=NUM_REPLICAS,
                                    next_load=self.windows[index + 1])
        if isinstance(placement, str):
            return f"rebalance on window {index} (scored on window {index + 1}): {placement}"
        self.scores.append(window_balance(placement, self.windows[index + 1], NUM_GPUS))
        self.times.append(float(t_alg))
        return None


class EplbTask(Task):
    """Expert-parallel load balancing (EPLB) for a DeepSeek-V3-shaped MoE model.

    The candidate's ``rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)``
    receives one window of expert loads (``[L, E]`` int64; a torch tensor with
    ``weight_type="torch"``) and returns ``(phy2log [L, R], log2phy [L, E, K], logcnt [L, E])``.
    It runs in one sandbox session per evaluation, one timed call per window; the placement made on
    window ``i`` is scored on window ``i + 1``, which the candidate never sees.

    Score (maximize): ``(mean bal_expert + 0.002 / mean t_alg) / 2``, where ``t_alg`` is each call's
    wall time measured by the trusted side around request and response (so it includes a fixed
    sandbox round trip, reported as ``t_roundtrip_floor_s``); ``bal_expert``, ``bal_gpu`` and
    ``t_alg`` are reported separately. Any broken rule is ``INVALID`` with the window, layer and reason.

    What the speed term counts: only the wall time of each call, as the trusted side sees it. Work the
    candidate does outside its calls (at import, or in threads that run on after a call returns) is not
    in ``t_alg``; it is bounded by the one wall-time limit of the whole session and the memory limit;
    the session's total CPU time is reported as ``cpu_s``, and the part of it beyond the timed calls'
    wall time as ``metrics["cpu_beyond_calls_s"]`` (not scored). It cannot see the window it is scored on
    earlier than any other candidate: window ``i + 1`` enters the sandbox only with call ``i + 1``.

    With ``weight_type="torch"`` the sandbox must be able to import torch: give the pool
    ``SandboxConfig(preload=(*DEFAULT_PRELOAD, "torchgen", "sympy", "mpmath", "networkx", "jinja2",
    "markupsafe", "filelock", "fsspec", "torch"))`` (the workers mirror only what they preload).

    The score is timed, hence ``deterministic=False`` and no recorded ``seed_score``: the speed term
    ``0.002 / t_alg`` of the seed program moves by tens of percent with machine load (no tolerance
    would be both safe and meaningful), so ``check_task`` checks that the seed runs ``OK``, and the
    tests pin its time-independent balance figures against the published algorithm instead.

    Args:
        trace_path: a published load trace (``{"load_history": [{"logical_expert_load": [[E] x L]}]}``);
            None uses the synthetic trace. Parsed once per process.
        num_windows: windows used (the first ones); None: 11 synthetic windows, or all of a file's.
trace_seed: public seed of the synthetic trace when ``evaluate`` gets no seed (a seed passed to
            ``evaluate`` selects the synthetic trace instead; ignored for a trace file). The generator's
            own seed is derived from it with the evaluator's secret (:mod:`reasearch.evaluators._secret`),
            so knowing it and the generator does not reveal the scored windows; results record the
            secret's fingerprint as ``trace_secret``.
        window_size: history entries summed per window.
        weight_type: ``"numpy"`` (default) or ``"torch"`` (published torch programs run unchanged).
        time_limit_s: wall-time limit of a whole evaluation (all calls together).
        memory_mb: address-space limit of the candidate process.
    """

    harness = "reasearch.evaluators.eplb.harness:rebalance"

    def __init__(
        self,
        *,
        trace_path: str | None = None,
        num_windows: int | None = None,
        trace_seed: int = 0,
        window_size: int = 100,
        weight_type: str = "numpy",
        time_limit_s: float = 60.0,
        memory_mb: int = 4096,
    ) -> None:
        self.trace_path = trace_path
        self.num_windows = num_windows
        self.trace_seed = trace_seed
        self.window_size = window_size
        self.weight_type = weight_type
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb

    # ------------------------------------------------------------------------------------ spec

    def _make_spec(self) -> TaskSpec:
        if self.weight_type not in _WEIGHT_TYPES:
            raise ConfigError(f"weight_type must be one of {_WEIGHT_TYPES}, got {self.weight_type!r}")
        if self.num_windows is not None and (not isinstance(self.num_windows, int) or self.num_windows < 2):
            raise ConfigError(f"num_windows must be an integer >= 2 (or None), got {self.num_windows!r}")
        if not isinstance(self.window_size, int) or self.window_size <= 0:
            raise ConfigError(f"window_size must be a positive integer, got {self.window_size!r}")
        return TaskSpec(
            id="eplb/v1",
            version=1,
            direction="maximize",
            time_limit_s=float(self.time_limit_s),
            memory_mb=int(self.memory_mb),
            best_known=None,
            entry_point="rebalance_experts",
            deterministic=False,
            seed_score=None,
            params={
                "trace_path": None if self.trace_path is None else str(self.trace_path),
                "num_windows": self.num_windows,
                "trace_seed": int(self.trace_seed),
                "window_size": int(self.window_size),
                "weight_type": self.weight_type,
                "time_limit_s": float(self.time_limit_s),
                "memory_mb": int(self.memory_mb),
            },
        )

    def describe(self) -> str:
        source = (f"the load trace {self.trace_path}" if self.trace_path else
                  "a synthetic DeepSeek-V3-shaped trace (58 MoE layers x 256 experts, heavy-tailed expert "
                  "popularity with slow drift and per-batch noise)")
        kind = "a torch.int64 tensor" if self.weight_type == "torch" else "a NumPy int64 array"
        return (
            "Expert-parallel load balancing (EPLB) for a mixture-of-experts model.\n"
            "Define `rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)` returning "
            "`(phy2log, log2phy, logcnt)`:\n"
            f"- `weight`: [L, E] tokens routed to each logical expert in each layer ({kind}), summed over "
            f"a window of {self.window_size} batches;\n"
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
            f"Score (maximize): (mean bal_expert + {SPEED_NUMERATOR_S} / mean t_alg) / 2, where t_alg is the "
            "wall time of each call, measured by the evaluator around the call: it includes the sandbox round "
            "trip (reported as t_roundtrip_floor_s) and sending your arrays back, so a log2phy no wider than "
            "needed helps. Only the calls are timed: work done between calls (at import or in background "
            "threads) is not in t_alg, but it shares the one wall-time limit of the whole session and "
            "cannot see a window before it is sent. bal_expert, bal_gpu and t_alg are reported separately.\n"
            "The seed program is DeepSeek's published hierarchical algorithm; its compiled steps are "
            "importable: `from reasearch.native.eplb import balanced_packing, replicate_experts, "
            "rebalance_experts`.\n"
            f"Limits: {self.time_limit_s:g} s wall time for all calls together, {self.memory_mb} MB memory; "
            "NumPy, SciPy and numba are available, no network."
        )

    def seed_program(self) -> str:
        return resources.files(__package__).joinpath("seed.py.txt").read_text(encoding="utf-8")

    # ----------------------------------------------------------------------------------- trace

    def trace_windows(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """The ``[W, L, E]`` windows this evaluation uses, and what they are (recorded in the metrics).

        Raises:
            ConfigError: the trace cannot hold the configuration, or has fewer than two windows.
        """
        if self.trace_path:
            windows = load_trace_windows(self.trace_path, int(self.window_size))
            if self.num_windows is not None:
                windows = windows[: int(self.num_windows)]
            info: dict[str, Any] = {"trace": str(self.trace_path), "trace_seed": None, "trace_secret": None}
        else:
            # The generator is public and its code could be pasted into a candidate, so the public seed only
            # names the trace: the generator's seed is derived from it with the evaluator's secret.
            trace_seed = int(self.trace_seed if seed is None else seed)
            public = SyntheticTrace(seed=0, window_size=int(self.window_size)).to_dict()
            public.pop("seed")
            key = secret()
            trace = SyntheticTrace(seed=derive_seed("eplb/v1 synthetic trace", {**public, "seed": trace_seed}, key),
                                   window_size=int(self.window_size))
            windows = trace.windows(int(self.num_windows or DEFAULT_SYNTHETIC_WINDOWS))
            info = {"trace": "synthetic", "trace_seed": trace_seed, "trace_params": public,
                    "trace_secret": fingerprint(key)}
        if windows.shape[0] < 2:
            raise ConfigError(f"the trace has {windows.shape[0]} window(s) of {self.window_size} entries; "
                              "at least 2 are needed (one to place on, one to score on)")
        validate_layout(int(windows.shape[2]), NUM_REPLICAS, NUM_GROUPS, NUM_NODES, NUM_GPUS)
        info.update(num_layers=int(windows.shape[1]), num_experts=int(windows.shape[2]),
                    num_windows=int(windows.shape[0]), window_size=int(self.window_size))
        return windows, info

    def _call_payload(self, weight: np.ndarray) -> dict[str, Any]:
        return {"weight": compact(weight), "num_replicas": NUM_REPLICAS, "num_groups": NUM_GROUPS, "num_nodes": NUM_NODES,
                "num_gpus": NUM_GPUS, "weight_type": self.weight_type}

    # ------------------------------------------------------------------------------ evaluation

    def evaluate(
        self,
        candidate_source: str,
        *,
        seed: int | None = None,
        executor: SandboxRunner | None = None,
    ) -> EvalResult:
        """Runs the candidate once per window in one sandbox session, timing each call; scores the results.

        Args:
            candidate_source: the candidate program's source text.
            seed: selects the synthetic trace (default: the task's ``trace_seed``); recorded in provenance.
            executor: a sandbox runner; default: the process-wide warm pool.
        """
        if not isinstance(candidate_source, str):
            raise TypeError(f"candidate_source must be str, not {type(candidate_source).__name__}")
        windows, info = self.trace_windows(seed)
        runner = executor if executor is not None else default_runner()
        deadline = time.perf_counter() + float(self.time_limit_s)
        session = runner.session(self.build_request(candidate_source, seed=seed))
        tally = _Tally(windows)
        problem: tuple[Status, str] | None = None
        floor: float | None = None
        try:
            if not getattr(session, "closed", False):  # a candidate that failed to load ends the session
                for _ in range(_PINGS):  # the round trip every call pays, without the candidate (fastest of 3)
                    ping = session.call({**self._call_payload(windows[0]), "ping": True},
                                        timeout_s=max(deadline - time.perf_counter(), 0.001))
                    if ping.status is not Status.OK:
                        detail = ping.error.strip() or "no further detail"
                        problem = (ping.status, f"before the first rebalance: {ping.status.value}: {detail}")
                        break
                    floor = ping.wall_s if floor is None else min(floor, ping.wall_s)
                for i in range(windows.shape[0] - 1 if problem is None else 0):
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        text = (f"the time limit of {self.time_limit_s:g} s ran out after {i} of "
                                f"{windows.shape[0] - 1} rebalances")
                        problem = (Status.TIMEOUT, text)
                        break
                    out = session.call(self._call_payload(windows[i]), timeout_s=remaining)
                    if out.status is not Status.OK:
                        detail = out.error.strip() or "no further detail"
                        problem = (out.status, f"rebalance on window {i}: {out.status.value}: {detail}")
                        break
                    reason = tally.add(i, out.value, out.wall_s)
                    if reason is not None:
                        problem = (Status.INVALID, reason)
                        break
        finally:
            final = session.close()
        prov = self.provenance(candidate_source, seed=seed, sandbox_mode=final.sandbox_mode)
        if info.get("trace_secret"):  # which secret scored it (its fingerprint): reproducible where it is kept
            prov = dataclasses.replace(prov, versions={**prov.versions, "trace_secret": info["trace_secret"]})
        if problem is None and final.status is not Status.OK:
            problem = (final.status, failure_feedback(final))
        if problem is not None:
            status, text = problem
            if status is not Status.INVALID and final.stderr.strip():
                text += "\nstderr (tail):\n" + final.stderr[-2000:]
            return EvalResult.failure(status, text, wall_s=final.wall_s, cpu_s=final.cpu_s,
                                      metrics={**info, "windows_scored": len(tally.scores)}, provenance=prov)
        result = self._summarize(tally, info, floor)
        # Not scored (t_alg is the timed calls' wall time, as the spec says); shown so that work moved out
        # of the calls (at import, between calls, in threads) is visible: session CPU beyond the timed walls.
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
        windows, info = self.trace_windows(seed)
        need = windows.shape[0] - 1
        if not isinstance(placements, Sequence) or not isinstance(times, Sequence):
            return self.invalid("placements and t_alg_s must be lists")
        if len(placements) != need or len(times) != need:
            return self.invalid(f"expected {need} placements and {need} times (one per window but the last), "
                                f"got {len(placements)} and {len(times)}")
        tally = _Tally(windows)
        for i, (answer, t) in enumerate(zip(placements, times)):
            if not isinstance(t, (int, float)) or not np.isfinite(t) or t <= 0:
                return self.invalid(f"t_alg_s[{i}] must be a positive number of seconds, got {t!r}")
            reason = tally.add(i, answer, float(t))
            if reason is not None:
                return self.invalid(reason, metrics={**info, "windows_scored": len(tally.scores)})
        return self._summarize(tally, info, None)

    def _summarize(self, tally: _Tally, info: Mapping[str, Any], floor: float | None) -> EvalResult:
        bal_expert = statistics.fmean(s.bal_expert for s in tally.scores)
        bal_gpu = statistics.fmean(s.bal_gpu for s in tally.scores)
        t_alg = statistics.fmean(tally.times)
        speed = SPEED_NUMERATOR_S / t_alg
        combined = (bal_expert + speed) / 2.0
        worst = min(range(len(tally.scores)), key=lambda i: tally.scores[i].bal_gpu)
        ws = tally.scores[worst]
        metrics: dict[str, Any] = {
            "combined": combined,
            "bal_expert": bal_expert,
            "bal_gpu": bal_gpu,
            "t_alg_s": t_alg,
            "speed_score": speed,
            "t_alg_median_s": statistics.median(tally.times),
            "t_alg_max_s": max(tally.times),
            "t_roundtrip_floor_s": floor,
            "windows_scored": len(tally.scores),
            "bal_expert_per_window": [s.bal_expert for s in tally.scores],
            "bal_gpu_per_window": [s.bal_gpu for s in tally.scores],
            "t_alg_per_window_s": list(tally.times),
            **info,
        }
        floor_text = f" (of which ~{floor * 1e3:.2f} ms is the sandbox round trip)" if floor else ""
        feedback = (
            f"{len(tally.scores)} rebalances, each scored on the next window. "
            f"combined = (bal_expert {bal_expert:.4f} + {SPEED_NUMERATOR_S} / t_alg {t_alg * 1e3:.3f} ms) / 2 "
            f"= ({bal_expert:.4f} + {speed:.4f}) / 2 = {combined:.4f}.\n"
            f"bal_gpu {bal_gpu:.4f} (mean over windows); t_alg median {statistics.median(tally.times) * 1e3:.3f} "
            f"ms, max {max(tally.times) * 1e3:.3f} ms{floor_text}.\n"
            f"Worst window for GPU balance: window {worst} -> {worst + 1}, bal_gpu {ws.bal_gpu:.4f}, bal_expert "
            f"{ws.bal_expert:.4f}; its worst layer is {ws.worst_layer} (bal_gpu {ws.worst_layer_bal_gpu:.4f})."
        )
        return self.result(combined, metrics=metrics, feedback=feedback)
