"""The soak's model endpoint: OpenAI-compatible, answering each run from a mutating model, with faults.

Each run calls it under its own model name (the run id), so it keeps one account per run: requests
received, and every reply it answered in full (a nonce written into the reply's text, and the tokens it
reported). A reply is counted as answered before its bytes are written: a driver killed while the reply
is on the wire may or may not have read it, and the ledger must then hold the call all the same (at its
reservation). Faults come from the soak's schedule, keyed by (run, request number): HTTP 500, a hang
past the client's timeout, a garbage body, a reply cut mid-body, a slow reply, and a hold (the request
is kept unanswered until the harness, having killed the driver, lets it go).

Trust boundary: listens on 127.0.0.1 only; request bodies come from the project's own drivers and are
only parsed as JSON; nothing is executed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import Any

from reasearch.evaluators.testing import TOY_TRAIN
from reasearch.methods.testing import MutatingModel
from reasearch.models.messages import ModelReply, StopReason, text_block
from reasearch.models.testing import LocalHTTPServer, chat_completion_json

__all__ = ["ENDPOINT_FAULTS", "HOSTILE_TRAIN", "TRAIN_SLEEP_S", "Account", "ChaosEndpoint", "nonce_of"]

ENDPOINT_FAULTS = ("http_500", "hang", "garbage", "cut", "slow")
TRAIN_SLEEP_S = 0.3  # how long the toy train.py of a training agent's experiment runs: a kill finds it mid-way
# The training agent's train.py: the toy task's, plus what a hostile one tries first: a double-forked setsid daemon
# that outlives the job (holding the slot lease it inherited) unless the driver, or the pruner after a dead
# driver, ends every process of the job's uid (under nsjail, the job's PID namespace ends it).
_DAEMON = """if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
    os._exit(0)
"""
HOSTILE_TRAIN = TOY_TRAIN.replace("settings = json.load", _DAEMON + "settings = json.load", 1)
assert _DAEMON in HOSTILE_TRAIN  # the toy script still reads its settings where the daemon goes in first
_NONCE = "chaos-reply-"


def nonce_of(text: str) -> str | None:
    """The endpoint's nonce in a reply's text (None: not one of its replies)."""
    at = text.rfind(_NONCE)
    if at < 0:
        return None
    end = at + len(_NONCE)
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[at:end]


@dataclass
class Account:
    """What the endpoint did for one run."""

    received: int = 0
    answered: list[str] = field(default_factory=list)  # nonces of the replies answered in full (or held, then sent)
    tokens: float = 0.0  # tokens the endpoint reported for those replies
    faults: dict[str, int] = field(default_factory=dict)


class ChaosEndpoint(LocalHTTPServer):
    """An OpenAI-compatible endpoint on 127.0.0.1 that injects the faults ``fault_at(run, n)`` names.

    Args:
        fault_at: (run id, 1-based request number of that run) -> a fault of :data:`ENDPOINT_FAULTS`,
            ``"hold"``, or None (a plain answer).
        client_timeout_s: the drivers' HTTP timeout: a hang lasts past it, a slow reply stays within it.
        on_answer: called with (run id, request number) after each reply is counted (the harness
            schedules kills from it).
    """

    def __init__(self, fault_at: Callable[[str, int], str | None], *, client_timeout_s: float,
                 on_answer: Callable[[str, int], None] | None = None, seed_program: str = "") -> None:
        self.seed_program = seed_program
        self._programs: dict[str, str] = {}  # an agent run's last proposed program (the next one mutates it)
        self._experiments: dict[str, int] = {}  # a training agent's experiments asked for so far
        self.fault_at, self.client_timeout_s, self.on_answer = fault_at, client_timeout_s, on_answer
        self.accounts: dict[str, Account] = {}
        self.held: dict[str, threading.Event] = {}  # run id -> released when the harness killed its driver
        self.holding = threading.Condition()
        self._lock = threading.Lock()
        self._models: dict[str, MutatingModel] = {}
        self._serial = 0
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._raw(200, json.dumps({"object": "list", "data": [{"id": "chaos", "object": "model"}]}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                server._serve(self, body)

            def _raw(self, status: int, data: bytes, *, length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data) if length is None else length))
                if status != 200:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

        super().__init__(Handler)

    def account(self, run_id: str) -> Account:
        with self._lock:
            return self.accounts.setdefault(run_id, Account())

    def release(self, run_id: str) -> None:
        """Lets a held request of ``run_id`` go (its reply is counted and sent to whoever still listens)."""
        with self.holding:
            event = self.held.pop(run_id, None)
        if event is not None:
            event.set()

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        with self.holding:
            for event in self.held.values():
                event.set()
        super().__exit__(*exc)

    def _serve(self, handler: Any, body: Mapping[str, Any]) -> None:
        run_id = str(body.get("model", ""))
        with self._lock:
            acct = self.accounts.setdefault(run_id, Account())
            acct.received += 1
            n = acct.received
        fault = self.fault_at(run_id, n)
        if fault is not None:
            with self._lock:
                acct.faults[fault] = acct.faults.get(fault, 0) + 1
        try:
            if fault == "http_500":
                handler._raw(500, b'{"error": {"message": "chaos: internal error"}}')
                return
            if fault == "garbage":
                handler._raw(200, b"\x00\xffchaos: this is not a chat completion")
                return
            if fault == "hang":  # past the client's timeout, then the connection closes unanswered
                self._closing.wait(self.client_timeout_s + 1.0)
                return
            if fault == "cut":
                data = json.dumps(self._reply(run_id, body, count=False)).encode()
                handler._raw(200, data[: len(data) // 2], length=len(data))
                return
            if fault == "slow":
                self._closing.wait(self.client_timeout_s / 3)
            if fault == "hold":
                event = threading.Event()
                with self.holding:
                    self.held[run_id] = event
                    self.holding.notify_all()
                event.wait(600)
                if self._closing.is_set():
                    return
            reply = self._reply(run_id, body, count=True)
            if self.on_answer is not None:
                self.on_answer(run_id, n)
            handler._raw(200, json.dumps(reply).encode())
        except OSError:  # the driver was killed while its reply was on the wire: it stays counted
            pass

    def _reply(self, run_id: str, body: Mapping[str, Any], *, count: bool) -> dict[str, Any]:
        with self._lock:
            model = self._models.setdefault(run_id, MutatingModel(len(self._models) + 1))
            self._serial += 1
            nonce = f"{_NONCE}{self._serial}"
            tools = {str((t.get("function") or {}).get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
            if "run_experiment" in tools:  # an agent on a training task: a new settings.json, then one experiment
                k = self._experiments[run_id] = self._experiments.get(run_id, 0) + 1
                settings = json.dumps({"x": round(3.0 - 2.0 / k, 4), "sleep_s": TRAIN_SLEEP_S})
                reply = ModelReply((text_block(f"experiment {k}"),
                                    {"type": "tool_use", "id": f"call_{self._serial}t", "name": "write_file",
                                     "input": {"path": "train.py", "content": HOSTILE_TRAIN}},
                                    {"type": "tool_use", "id": f"call_{self._serial}a", "name": "write_file",
                                     "input": {"path": "settings.json", "content": settings}},
                                    {"type": "tool_use", "id": f"call_{self._serial}b", "name": "run_experiment",
                                     "input": {"description": f"x {k}", "time_budget_s": 20, "wait_s": 60}}),
                                   StopReason.TOOL_USE)
            elif "evaluate" in tools:  # an agent: one evaluate call a turn, of its last program mutated
                last = self._programs.get(run_id, self.seed_program)
                shown = [{"role": "user", "content": f"```python\n{last}\n```"}]
                text = model.complete(SimpleNamespace(messages=shown)).text  # type: ignore[arg-type]
                program = text.split("```python\n", 1)[-1].rsplit("\n```", 1)[0] if "```python" in text else last
                self._programs[run_id] = program
                reply = ModelReply((text_block("evaluating a variant"),
                                    {"type": "tool_use", "id": f"call_{self._serial}", "name": "evaluate",
                                     "input": {"code": program}}), StopReason.TOOL_USE)
            else:
                reply = model.complete(SimpleNamespace(messages=body.get("messages", [])))  # type: ignore[arg-type]
            payload = chat_completion_json(reply, model=run_id)
            message = payload["choices"][0]["message"]
            message["content"] = f"{message.get('content') or ''}\n{nonce}\n"
            if count:
                acct = self.accounts.setdefault(run_id, Account())
                acct.answered.append(nonce)
                usage = payload["usage"]
                acct.tokens += float(usage["prompt_tokens"]) + float(usage["completion_tokens"])
        return payload

    def wait_held(self, run_id: str, timeout_s: float) -> bool:
        """True once a request of ``run_id`` is held (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self.holding:
            while run_id not in self.held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.holding.wait(left)
        return True
