"""Held-out episodes played against a jailed policy server: the scoring loop of ``rl`` and ``atari`` tasks.

The trusted side (this process) holds the environments and steps them itself, all together: each step it
sends the observations of the running episodes (one ``.npy`` batch) to the fixed policy server
(``_policy_server.py``, beside this module) in a fresh jail, checks the answer with the task's own rule,
steps every running episode with its action and sums the undiscounted rewards. The server never holds an
environment: it sees observations, never a reward, a seed or the simulator's state.

Trust boundary: trusted side only (never in the jail's code copy). The policy server runs candidate code
on held-out observations, so its replies are untrusted data: parsed as ``.npy`` without pickle and checked
by the task's rule before any environment steps. No text of a reply, of the server's log or of a session
error reaches the feedback (candidate code could have put held-out observations there): a failure is told
from the checked ``error.json`` (:mod:`reasearch.evaluators._scoring_report`), the log stays on the host.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.engine.gpu import SlotLease
from reasearch.engine.training import SessionError, start_session
from reasearch.evaluators._scoring_report import REPORT_NAME, WITHHELD, describe_failure
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.training import scoring_jail_note

__all__ = ["POLICY_SERVER", "ActionCheck", "Played", "play_episodes"]

POLICY_SERVER = Path(__file__).with_name("_policy_server.py")
"""The fixed policy server, copied into each scoring folder and run there by path."""

ActionCheck = Callable[[np.ndarray, int], "np.ndarray | Sequence[Any] | str"]
"""The task's rule for a reply: ``(actions, running episodes) -> the action of each, or why it is invalid``."""


@dataclass(frozen=True, slots=True)
class Played:
    """Episodes played to their end: the return of each, the policy calls and environment steps it took."""

    returns: list[float]
    calls: int
    steps: int
    started: float  # time.monotonic() when the episodes were reset
    jail: str = ""  # what held in the policy server's jail (scoring_jail_note)

    def metrics(self, **extra: Any) -> dict[str, Any]:
        """What a result reports about the play (``extra`` between the counts and the time)."""
        return {"policy_calls": self.calls, "env_steps": self.steps, **extra,
                "score_s": round(time.monotonic() - self.started, 3), "scoring_jail": self.jail}


def play_episodes(envs: Sequence[Any], seeds: Sequence[int], *, exp_dir: Path, repo_dir: Path, ckpt_dir: Path,
                  lease: SlotLease, dtype: type[np.generic], check: ActionCheck, invalid: Callable[[str], EvalResult],
                  steps: Mapping[str, str], time_limit_s: float, memory_mb: int,
                  sandbox_mode: str, packages: tuple[str, ...] = ()) -> Played | EvalResult:
    """Resets ``envs`` with ``seeds`` and plays them to their end against the candidate's policy server.

    Args:
        envs: Gymnasium environments, one per episode (closed here, whatever happens).
        seeds: the episodes' seeds (held out: derived from the evaluator's secret).
        exp_dir: the experiment's folder; the server's writable folder ``eval`` and host log ``scoring``
            are made in it.
        repo_dir, ckpt_dir: the candidate's repository and checkpoint, bound read-only.
        lease: the slot the server runs on.
        dtype: what the observations are sent as (float64 for MuJoCo, uint8 frames for Atari).
        check: the task's rule for a reply (see :data:`ActionCheck`).
        invalid: builds the task's ``INVALID`` result from a reason.
        steps: the server's steps, in words for the feedback (``error.json`` names one).
        time_limit_s: wall limit of the whole play.
        memory_mb: address-space limit of the server on a CPU slot.
        sandbox_mode: ``auto``, ``nsjail`` or ``process``.
        packages: the scoring package list: the server's runtime holds these and nothing else (no emulator,
            no simulator), and nothing of the candidate's is executable there (``noexec``).

    Returns:
        :class:`Played`, or the failure's result (``TIMEOUT``, ``INVALID`` or ``CRASH``).
    """
    try:
        folder = _scoring_folder(exp_dir, repo_dir, ckpt_dir)
        obs = [e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)]
        return _play(envs, obs, folder, repo_dir=repo_dir, ckpt_dir=ckpt_dir, lease=lease, dtype=dtype, check=check,
                     invalid=invalid, steps=steps, time_limit_s=time_limit_s, memory_mb=memory_mb,
                     sandbox_mode=sandbox_mode, packages=packages)
    finally:
        for e in envs:
            e.close()


def _scoring_folder(exp_dir: Path, repo_dir: Path, ckpt_dir: Path) -> Path:
    """The server's writable folder ``exp_dir/eval`` with the server and its request in it (and the host log's
    folder ``exp_dir/scoring``, mode 0700, never bound into a jail)."""
    folder = exp_dir / "eval"
    folder.mkdir(mode=0o755)
    (exp_dir / "scoring").mkdir(mode=0o700, exist_ok=True)
    (folder / POLICY_SERVER.name).write_text(POLICY_SERVER.read_text())
    (folder / "request.json").write_text(json.dumps({"repo": str(repo_dir), "ckpt": str(ckpt_dir),
                                                     "report": str(folder / REPORT_NAME)}))
    return folder


def _play(envs: Sequence[Any], obs: list[Any], folder: Path, *, repo_dir: Path, ckpt_dir: Path, lease: SlotLease,
          dtype: type[np.generic], check: ActionCheck, invalid: Callable[[str], EvalResult],
          steps: Mapping[str, str], time_limit_s: float, memory_mb: int, sandbox_mode: str,
          packages: tuple[str, ...]) -> Played | EvalResult:
    """The episodes, stepped together from ``obs`` until every one has ended (see :func:`play_episodes`)."""
    server, log = folder / POLICY_SERVER.name, folder.parent / "scoring" / "policy.log"
    returns = [0.0] * len(envs)
    running = list(range(len(envs)))
    calls = done = 0
    jail = ""
    t0 = time.monotonic()
    deadline = t0 + float(time_limit_s)
    try:
        with start_session(["python3", str(server), str(folder / "request.json")], cwd=folder, lease=lease,
                           wall_s=float(time_limit_s) + 10, log_path=log, binds_ro=[repo_dir, ckpt_dir],
                           binds_rw=[folder], memory_mb=None if lease.gpu else int(memory_mb),
                           mode=sandbox_mode, packages=packages, noexec=True) as session:
            jail = scoring_jail_note(session.sandbox_mode, packages)
            while running:
                if time.monotonic() > deadline:
                    return EvalResult.failure(Status.TIMEOUT, f"scoring passed {time_limit_s:g} s "
                                                              f"after {done} steps: the policy is too slow")
                buf = io.BytesIO()
                np.save(buf, np.stack([obs[i] for i in running]).astype(dtype), allow_pickle=False)
                reply = session.call(buf.getvalue(), timeout_s=max(1.0, deadline - time.monotonic()))
                calls += 1
                # No text of the reply goes into the feedback: policy.act saw held-out observations.
                try:
                    actions = np.load(io.BytesIO(reply), allow_pickle=False)
                except (ValueError, OSError, EOFError):
                    return invalid("the policy server's reply was not an .npy array (candidate code "
                                   "must not write to the reply channel, fd 1 of the server)")
                chosen = check(actions, len(running))
                if isinstance(chosen, str):
                    return invalid(chosen)
                still = []
                for row, i in enumerate(running):
                    obs[i], reward, terminated, truncated, _ = envs[i].step(chosen[row])
                    returns[i] += float(reward)
                    done += 1
                    if not (terminated or truncated):
                        still.append(i)
                running = still
    except SessionError:  # its message may hold numbers the candidate chose (a frame length): not shown
        step, text = describe_failure(folder, repo_dir, steps, "the policy server")
        if step is None and not (folder / REPORT_NAME).exists():
            text = (f"the policy server failed: it exited, stopped answering, or broke the reply framing after "
                    f"{done} environment steps. {WITHHELD}")
        return EvalResult.failure(Status.CRASH, text, metrics={"policy_calls": calls, "env_steps": done})
    return Played(returns, calls, done, t0, jail)
