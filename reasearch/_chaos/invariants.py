"""The invariants a soak checks at its end, each a named check that prints its counterexamples.

- ``runs_finished``: every run ended ``finished`` (the harness resumes whatever it killed) and holds no
  budget reservation.
- ``model_calls_once``: every reply the endpoint answered is in exactly one run's ledger: journaled in
  one run only and debited once there, or (answered while its driver died) charged at its reservation;
  the ledger holds no model call beyond those (at most one charged at its reservation per driver death,
  none beyond the requests the endpoint received), and its tokens are at least what the endpoint reported.
- ``evaluations_once``: every evaluation a sandbox ran for a run is debited once in its ledger (plus
  those charged at their reservation when the driver died with one in flight: at most one per death);
  no ledger row twice.
- ``experiments_once``: a training run's experiments are each recorded once (a result, or interrupted when the
  driver died first), charged one experiment at most, a failure (a killed training job) never scores or is chosen.
- ``nothing_left_behind``: no process the soak started (a driver, a sandbox worker, a jail, a training job)
  outlives it, no mount under its scratch root or experiments root is left, no experiment scratch folder, no
  slot lease held, and the SQLite store's write lock can be taken.
- ``waits_bounded``: no wait lasted past its stated timeout (a driver session that hung, a kill that
  did not take).
- ``caps_held``: no run spent more of any unit than its cap.
- ``live_drivers_kept``: a driver whose process was alive was never judged dead when the clock the
  liveness code reads jumped forward.
- ``deaths_explained``: a driver that died of an exception died of one of the project's own errors (a
  full disk, a lost database, a worker that would not start: a ``StoreError`` or ``SandboxError`` whose
  one line says what to do), never of a raw ``sqlite3``/``psycopg`` error or a bug.

Each check is a function of a :class:`SoakRecord` (the store and what the harness and endpoint saw),
so a test can break one invariant on purpose and see the check name it. Trust boundary: reads the
soak's own store, ``/proc`` and the endpoint's counts; runs nothing.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reasearch import errors
from reasearch._chaos.endpoint import Account, nonce_of
from reasearch._chaos.training import experiment_processes, held_leases
from reasearch.runs import RunState, Unit, open_store
from reasearch.runs.events import REPLY_KINDS, EventKind, base_kind
from reasearch.runs.ledger import LedgerEntry
from reasearch.runs.liveness import process_start
from reasearch.runs.store import Store, charged_mark

__all__ = ["CHECKS", "SoakRecord", "Violation", "Wait", "check_all", "soak_processes"]

EPS = 1e-9
_REPLY_KINDS = {str(k) for k in (*REPLY_KINDS, EventKind.METHOD_REPLY)}  # one journaled model call each


@dataclass(frozen=True, slots=True)
class Violation:
    """One counterexample of one named invariant."""

    check: str
    counterexample: str

    def __str__(self) -> str:
        return f"VIOLATION {self.check}: {self.counterexample}"


@dataclass(frozen=True, slots=True)
class Wait:
    """One wait of the harness: what it waited for, how long, and the timeout it stated."""

    what: str
    waited_s: float
    timeout_s: float


@dataclass
class SoakRecord:
    """What a soak leaves for the checks: its store, runs and caps, the endpoint's accounts, the harness's
    waits, the processes it saw under its drivers, and its clock-jump observations."""

    root: str  # the soak's scratch root (store, logs); every process it starts carries it in its environment
    store_url: str
    caps: dict[str, dict[str, float]]  # run id -> cap per unit name
    accounts: dict[str, Account]
    waits: list[Wait] = field(default_factory=list)
    seen_processes: dict[int, str] = field(default_factory=dict)  # pid -> process_start, under a driver once
    clock_misjudged: list[str] = field(default_factory=list)
    deaths: dict[str, int] = field(default_factory=dict)  # run id -> driver sessions that ended unfinished
    in_flight_per_death: int = 1  # the most model calls (and evaluations) one run has in flight at once
    groups: dict[str, list[str]] = field(default_factory=dict)  # a fleet's id -> its members' run ids
    student: dict[str, int] = field(default_factory=dict)  # run id -> student requests the fake student answered
    experiments: str = ""  # the training runs' experiments root ("": no training run)
    leases: str = ""  # their slot lease folder
    job_kills: dict[str, int] = field(default_factory=dict)  # run id -> training jobs killed while its driver lived

    def account_of(self, run_id: str) -> str:
        """The endpoint account (model name) a run calls under: its fleet's id, or its own."""
        return next((g for g, members in self.groups.items() if run_id in members), run_id)

    def deaths_of(self, run_id: str) -> int:
        """Driver deaths of a run (a fleet member dies with its fleet's driver)."""
        return self.deaths.get(self.account_of(run_id), 0)


def _ledger_sum(ledger: Sequence[LedgerEntry], unit: Unit, *, in_flight: bool | None = None) -> float:
    """The amounts of ``unit`` in a run's ledger (read once per check): charges at reservation only
    (``in_flight`` True), everything else (False), or both (None)."""
    return sum(e.amount for e in ledger if e.unit is unit
               and (in_flight is None or (charged_mark(e.note) is not None) == in_flight))


def runs_finished(rec: SoakRecord, store: Store) -> list[str]:
    out = []
    for run_id in rec.caps:
        try:
            state = store.get_run(run_id)
        except Exception as exc:  # a run never created is not finished either
            out.append(f"run {run_id}: not in the store ({exc})")
            continue
        if state.state is not RunState.FINISHED:
            out.append(f"run {run_id}: state {state.state.value} ({state.reason or 'no reason'})")
        held = store.reserved(run_id)
        if held:
            out.append(f"run {run_id}: reservations left {dict((u.value, a) for u, a in held.items())}")
    return out


def model_calls_once(rec: SoakRecord, store: Store) -> list[str]:
    """Per run: its journaled replies were answered for its account, and debited once each; no call charged
    at its reservation was also debited for its journaled reply (paid twice: a reply names the reservation it
    was held under, a charge's note too). Per account (a run, or a fleet whose members share one model
    name): every reply answered is journaled in one of its runs or charged at a reservation, tokens are all
    in the ledgers, and no more was debited than received.

    A charge at reservation need not match a request received: a driver killed after it reserved a call and
    before the request left is charged all the same (the resume cannot tell that from a call answered and
    lost, and issue 40 item 3 charges what may have been answered). Those charges are bounded by the run's
    driver deaths, and the reservation check above is what says none of them paid for a reply twice."""
    out = []
    journaled_in: dict[str, list[str]] = {}
    answered_by = {n: account for account, acct in rec.accounts.items() for n in acct.answered}
    paid: dict[str, list[float]] = {}  # account -> [debited, charged at reservation, tokens]
    journaled: dict[str, set[str]] = {}  # account -> nonces journaled by its runs
    for run_id in rec.caps:
        account = rec.account_of(run_id)
        replies = [e for e in store.events(run_id) if base_kind(e.kind) in _REPLY_KINDS and "reply" in e.payload]
        nonces = []
        for e in replies:
            reply = e.payload.get("reply") or {}
            text = "".join(b.get("text", "") for b in reply.get("content", []) if isinstance(b, Mapping))
            nonce = nonce_of(text)
            if nonce is None or answered_by.get(nonce) != account:
                out.append(f"run {run_id} step {e.step}: a journaled reply the endpoint never answered it ({nonce})")
            if nonce is not None:
                nonces.append(nonce)
                journaled_in.setdefault(nonce, []).append(f"{run_id}@{e.step}")
        ledger = store.ledger(run_id)
        debited = _ledger_sum(ledger, Unit.MODEL_CALLS, in_flight=False)
        charged = _ledger_sum(ledger, Unit.MODEL_CALLS, in_flight=True)
        replied = {e.payload["reservation"] for e in replies if "reservation" in e.payload}
        for row in ledger:
            if row.unit is Unit.MODEL_CALLS and (mark := charged_mark(row.note)) is not None and mark in replied:
                out.append(f"run {run_id} step {row.step}: a model call charged at its reservation "
                           f"[{mark}] and debited for its journaled reply (paid twice)")
        if abs(debited - len(replies)) > EPS:
            out.append(f"run {run_id}: {debited:g} model calls debited for {len(replies)} journaled replies")
        sums = paid.setdefault(account, [0.0, 0.0, 0.0])
        sums[0] += debited
        sums[1] += charged
        sums[2] += _ledger_sum(ledger, Unit.TOKENS)
        journaled.setdefault(account, set()).update(nonces)
        if charged > rec.deaths_of(run_id) * rec.in_flight_per_death + EPS:
            out.append(f"run {run_id}: {charged:g} model calls charged at reservation for "
                       f"{rec.deaths_of(run_id)} driver deaths")
    for account, (debited, charged, tokens) in paid.items():
        acct = rec.accounts.get(account, Account())
        who = f"fleet {account} ({len(rec.groups[account])} runs)" if account in rec.groups else f"run {account}"
        lost = sorted(set(acct.answered) - journaled[account])
        if len(lost) > charged + EPS:
            out.append(f"{who}: {len(lost)} replies answered but neither journaled nor charged "
                       f"(charged at reservation: {charged:g}): {lost[:5]}")
        if tokens + EPS < acct.tokens:
            out.append(f"{who}: ledger tokens {tokens:g} < tokens the endpoint answered {acct.tokens:g}")
        if debited > acct.received + EPS:
            out.append(f"{who}: {debited:g} model calls debited for {acct.received} requests received")
    for nonce, where in journaled_in.items():
        if len(where) > 1:
            out.append(f"reply {nonce} journaled {len(where)} times: {where}")
    return out


def evaluations_once(rec: SoakRecord, store: Store) -> list[str]:
    out = []
    for run_id in rec.caps:
        ledger = store.ledger(run_id)
        for key, n in Counter((e.step, e.unit.value, e.note) for e in ledger).items():
            if n > 1:
                out.append(f"run {run_id}: ledger row (step, unit, note) = {key} {n} times")
        if "evaluations" not in rec.caps[run_id]:  # a prompt run pays per student call: student_calls_once
            continue
        ran = [ev for ev in store.evaluations(run_id)
               if not ev.result.cached and ev.result.status.value != "REFUSED"]
        debited = _ledger_sum(ledger, Unit.EVALUATIONS, in_flight=False)
        if abs(debited - len(ran)) > EPS:
            out.append(f"run {run_id}: {debited:g} evaluations debited for {len(ran)} that ran")
        charged = _ledger_sum(ledger, Unit.EVALUATIONS, in_flight=True)
        if charged > rec.deaths_of(run_id) * rec.in_flight_per_death + EPS:
            out.append(f"run {run_id}: {charged:g} evaluations charged at reservation for "
                       f"{rec.deaths_of(run_id)} driver deaths")
        by_step = Counter(e.step for e in ledger if e.unit is Unit.EVALUATIONS and charged_mark(e.note) is None)
        for ev in ran:
            if by_step.get(ev.step, 0) != 1:
                out.append(f"run {run_id} step {ev.step}: evaluation debited {by_step.get(ev.step, 0)} times")
    return out


def student_calls_once(rec: SoakRecord, store: Store) -> list[str]:
    """Every student call the fake student answered for a prompt run is in its ledger: debited once, or (answered
    while its driver died) inside a charge at the evaluation's reservation; none debited beyond those answered."""
    out = []
    for run_id, answered in rec.student.items():
        if run_id not in rec.caps:
            out.append(f"run {run_id}: {answered} student calls answered for a run the soak did not start")
            continue
        ledger = store.ledger(run_id)
        debited = _ledger_sum(ledger, Unit.STUDENT_CALLS, in_flight=False)
        charged = _ledger_sum(ledger, Unit.STUDENT_CALLS, in_flight=True)
        if debited > answered + EPS:
            out.append(f"run {run_id}: {debited:g} student calls debited for {answered} the student answered")
        if answered > debited + charged + EPS:
            out.append(f"run {run_id}: {answered} student calls answered, {debited:g} debited and {charged:g} "
                       "charged at reservation: some are in no ledger")
    return out


def experiments_once(rec: SoakRecord, store: Store) -> list[str]:
    """A training run's experiments: each one started is recorded once (its result, or ``experiment_interrupted``
    when its driver died first: never both, never an interrupted one with a stored result); each is charged one
    experiment at most (by its result, or at its reservation when its driver died); a failure has no score and
    is never the run's final choice; every training job the harness killed ended a failed or interrupted one."""
    out = []
    for run_id, caps in rec.caps.items():
        if "experiments" not in caps:
            continue
        events = store.events(run_id)
        started = sorted({e.step for e in events if e.kind == EventKind.EXPERIMENT_START})
        ends: dict[int, list[str]] = {}
        for e in events:
            if e.kind in (EventKind.EXPERIMENT, EventKind.EXPERIMENT_INTERRUPTED):
                ends.setdefault(e.step, []).append(str(e.kind))
        evals = {ev.step: ev for ev in store.evaluations(run_id)}
        for step in started:
            if len(ends.get(step, [])) != 1:
                out.append(f"run {run_id} step {step}: experiment recorded {len(ends.get(step, []))} times "
                           f"{ends.get(step, [])}")
            elif ends[step] == [str(EventKind.EXPERIMENT_INTERRUPTED)] and step in evals:
                out.append(f"run {run_id} step {step}: recorded interrupted, but its result "
                           f"{evals[step].result.status.value} is stored")
        charged: dict[int, float] = {}
        ledger = store.ledger(run_id)
        for entry in ledger:
            if entry.unit is Unit.EXPERIMENTS:
                charged[entry.step] = charged.get(entry.step, 0.0) + entry.amount
        for step, amount in sorted(charged.items()):
            if amount > 1 + EPS:
                out.append(f"run {run_id} step {step}: {amount:g} experiments charged for one experiment")
        for step, ev in evals.items():
            debited = sum(x.amount for x in ledger if x.unit is Unit.EXPERIMENTS and x.step == step
                          and charged_mark(x.note) is None)
            if not ev.result.cached and abs(debited - 1.0) > EPS:
                out.append(f"run {run_id} step {step}: its experiment debited {debited:g} times")
            if ev.result.status.value != "OK" and ev.result.score is not None:
                out.append(f"run {run_id} step {step}: a {ev.result.status.value} experiment scored {ev.result.score}")
        in_flight = _ledger_sum(ledger, Unit.EXPERIMENTS, in_flight=True)
        if in_flight > rec.deaths_of(run_id) * rec.in_flight_per_death + EPS:
            out.append(f"run {run_id}: {in_flight:g} experiments charged at reservation for "
                       f"{rec.deaths_of(run_id)} driver deaths")
        failed = sum(1 for ev in evals.values() if ev.result.status.value not in ("OK", "REFUSED"))
        interrupted = sum(1 for kinds in ends.values() if str(EventKind.EXPERIMENT_INTERRUPTED) in kinds)
        if rec.job_kills.get(run_id, 0) > failed + interrupted:
            out.append(f"run {run_id}: {rec.job_kills[run_id]} training jobs killed, but only {failed} experiments "
                       f"failed and {interrupted} were interrupted")
        final = store.get_run(run_id).final_candidate
        chosen = [ev for ev in evals.values() if ev.candidate_id == final]
        if final and not any(ev.result.status.value == "OK" for ev in chosen):
            out.append(f"run {run_id}: its final candidate {final[:12]} comes from no OK experiment "
                       f"({[ev.result.status.value for ev in chosen]})")
    return out


def soak_processes(root: str) -> dict[int, str]:
    """Processes whose environment names the soak's root (every process a soak starts carries it): pid ->
    command line."""
    marker = f"REASEARCH_CHAOS_ROOT={root}".encode()
    out: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{name}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
        except OSError:
            continue
        if marker in env and not zombie:
            out[int(name)] = cmd[:120]
    return out


def still_running(pid: int, start: str) -> bool:
    """True when the process seen as ``pid`` (started at ``start``) still runs. A zombie does not: it has exited
    and only waits for its parent to collect it (a subreaper, such as a test process that started a sandbox
    pool, adopts a killed driver's orphans, which then stay zombies until it reaps them)."""
    if not start or process_start(pid) != start:
        return False
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def nothing_left_behind(rec: SoakRecord, store: Store) -> list[str]:
    listed = soak_processes(rec.root)
    out = [f"process left: pid {pid}: {cmd}" for pid, cmd in listed.items()]
    for pid, start in rec.seen_processes.items():
        if pid not in listed and still_running(pid, start):
            out.append(f"process left: pid {pid} (under a driver)")
    try:
        with open("/proc/mounts") as f:
            out += [f"mount left: {line.strip()}" for line in f if rec.root in line]
    except OSError:
        pass
    lock = _store_write_lock_held(rec.store_url)
    if lock:
        out.append(lock)
    return out + _training_left(rec, listed)


def _training_left(rec: SoakRecord, listed: Mapping[int, str]) -> list[str]:
    """What a training run may leave: a training job (any process working under the experiments root), an
    experiment's scratch folder (its tmpfs mount too), a slot lease still held."""
    if not rec.experiments:
        return []
    out = [f"process left: training job pid {pid}: {cmd}" for pid, cmd in experiment_processes(rec.experiments).items()
           if pid not in listed]
    try:
        names = sorted(os.listdir(rec.experiments))
    except OSError:
        names = []
    out += [f"experiment scratch left: {Path(rec.experiments) / n}" for n in names if n.startswith(("exp-", ".new-"))]
    try:
        with open("/proc/mounts") as f:
            out += [f"mount left: {line.strip()}" for line in f if rec.experiments in line and rec.root not in line]
    except OSError:
        pass
    return out + [f"slot lease left: {held}" for held in held_leases(rec.leases)]


def _store_write_lock_held(store_url: str) -> str:
    """A SQLite store whose write lock cannot be taken within a second: someone left it held ("" otherwise)."""
    path = Path(store_url)
    path = path if path.suffix in (".sqlite", ".db", ".sqlite3") else path / "store.sqlite"
    if store_url.startswith(("postgresql", "memory:")) or not path.is_file():
        return ""
    conn = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return ""
    except sqlite3.OperationalError as exc:
        return f"lock left: the store's write lock is held ({exc}): {path}"
    finally:
        conn.close()


def waits_bounded(rec: SoakRecord, store: Store) -> list[str]:
    return [f"{w.what}: waited {w.waited_s:.1f} s, stated timeout {w.timeout_s:.1f} s"
            for w in rec.waits if w.waited_s > w.timeout_s]


def caps_held(rec: SoakRecord, store: Store) -> list[str]:
    out = []
    for run_id, caps in rec.caps.items():
        used = store.usage(run_id)
        for unit, cap in caps.items():
            spent = used.get(Unit(unit), 0.0)
            if spent > cap + EPS:
                out.append(f"run {run_id}: {unit} used {spent:g} > cap {cap:g}")
    return out


def live_drivers_kept(rec: SoakRecord, store: Store) -> list[str]:
    return list(rec.clock_misjudged)


_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)): ?(.*)$")
_GROUP_MARGIN = re.compile(r"^\s*(?:\+-+.*|[|+] ?)")  # an exception group's traceback: its sub-exceptions' margin
_WRAPPERS = ("ExceptionGroup", "BaseExceptionGroup")  # a group is judged by the exceptions it holds
_MEMBER_FAILED = re.compile(r"^chaos: member (\S+) failed: crashed: ([A-Za-z_]\w*)(?:: (.*))?$")
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")


def deaths_explained(rec: SoakRecord, store: Store) -> list[str]:
    """A driver that died of an exception died of the project's own (``reasearch.errors``), whose message
    says what to do; never of a raw ``sqlite3``/``psycopg`` error or a bug's ``KeyError``."""
    out = []
    for run_id in sorted(set(rec.caps) - {m for members in rec.groups.values() for m in members} | set(rec.groups)):
        try:
            lines = [_GROUP_MARGIN.sub("", x) for x in
                     (Path(rec.root) / f"{run_id}.log").read_text(errors="replace").splitlines()]
        except OSError:
            continue  # no session ever wrote there
        for line in lines:  # a fleet member's failure, as its fleet recorded it: `crashed: Type: message (at ...)`
            member = _MEMBER_FAILED.match(line)
            if member is not None and not isinstance(getattr(errors, member.group(2), None), type):
                out.append(f"run {member.group(1)}: a fleet member died of a raw {member.group(2)}: "
                           f"{(member.group(3) or '')[:200]}")
        for i, line in enumerate(lines):
            m = _RAISED.match(line)
            if m is None or m.group(1).startswith("reasearch.errors.") or m.group(1) in _WRAPPERS:
                continue
            after = next((x for x in lines[i + 1:] if x.strip()), "")
            if not after.startswith(_CHAINED):  # the exception the driver died of, not a cause of it
                out.append(f"run {run_id}: a driver died of a raw {m.group(1)}: {m.group(2)[:200]}")
    return out


CHECKS: dict[str, Callable[[SoakRecord, Store], list[str]]] = {
    "runs_finished": runs_finished,
    "model_calls_once": model_calls_once,
    "evaluations_once": evaluations_once,
    "student_calls_once": student_calls_once,
    "experiments_once": experiments_once,
    "nothing_left_behind": nothing_left_behind,
    "waits_bounded": waits_bounded,
    "caps_held": caps_held,
    "live_drivers_kept": live_drivers_kept,
    "deaths_explained": deaths_explained,
}


def check_all(rec: SoakRecord, names: Sequence[str] | None = None) -> list[Violation]:
    """Every named check's counterexamples (all of them, not the first), in :data:`CHECKS` order.

    A SQLite store whose write lock is left held cannot be opened: that is reported (``nothing_left_behind``)
    with the processes and mounts left, and the checks that read the store do not run."""
    lock = _store_write_lock_held(rec.store_url)
    if lock:
        left = [f"process left: pid {pid}: {cmd}" for pid, cmd in soak_processes(rec.root).items()]
        return [Violation("nothing_left_behind", f"{lock} (the checks that read the store did not run)"),
                *(Violation("nothing_left_behind", c) for c in left)]
    store = open_store(rec.store_url)
    try:
        return [Violation(name, c) for name, fn in CHECKS.items() if names is None or name in names
                for c in fn(rec, store)]
    finally:
        store.close()
