"""A local OpenAI-compatible (and Messages-API) student for tests and benchmarks, whose answers really
depend on the system prompt. Shipped so other packages' tests can use it.

:class:`FakeStudentServer` answers ``POST /v1/chat/completions`` (and ``POST /v1/messages``) on
127.0.0.1. It knows the reference answers it is given (``answers``: input text -> answer) and behaves
like a weak student that a better prompt improves, deterministically:

* **skill**: it solves a problem when ``bucket(input) < skill``, where ``bucket`` is a hash of the input
  in ``[0, 100)``. The skill is 30, 70 with ``step by step`` in the system prompt, and 90 when the
  prompt also says ``double-check``. An unsolved problem gets a wrong answer (the reference plus one,
  or the reference with ``wrong`` appended for text answers).
* **format**: with ``final_answer`` in the prompt the reply ends with a fenced JSON object
  ``{"final_answer": <answer>}`` and a line of chatter; with ``####`` it ends ``#### <answer>``; with ``Answer:`` it
  ends
  ``Answer: <answer>``; otherwise it ends ``The answer is <answer> (found in 2 steps).`` (so a
  "last number" extraction picks the 2: the prompt must ask for a format).
* An input it does not know is answered ``I do not know.``

Fault injection: ``fail_first`` answers the first N requests with 429 (``Retry-After: 0``),
``fail_status`` answers inputs containing ``fail_marker`` always with that status, ``latency_s``
sleeps before each answer. ``hits`` counts requests per (system, input); ``requests`` counts all.
Hostile answers: ``usage_json`` is raw JSON text sent as every answer's ``usage`` (``{"prompt_tokens": 1e400}``,
``NaN``, ``"many"``: what ``json.dumps`` cannot write), and ``reply_text`` replaces every answer's text.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["FakeStudentServer", "student_skill", "bucket", "write_synthetic_gsm8k", "GOOD_PROMPT", "BETTER_PROMPT"]

GOOD_PROMPT = "Solve the problem step by step. End your reply with a line '#### <number>'."
BETTER_PROMPT = ("Solve the problem step by step, then double-check every calculation. "
                 "End your reply with a line '#### <number>'.")


def bucket(text: str) -> int:
    """A stable hash of an input in [0, 100)."""
    return int(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16) % 100


def student_skill(system: str) -> int:
    """The fake student's skill under a system prompt (see the module docs)."""
    s = system.lower()
    if "step by step" in s:
        return 90 if "double-check" in s else 70
    return 30


def _wrong(answer: str) -> str:
    try:
        value = Decimal(answer.replace(",", ""))
    except (InvalidOperation, ValueError):
        return answer + " wrong"
    return format((value + 1).normalize(), "f")


def fake_reply(system: str, user: str, answers: Mapping[str, str]) -> str:
    """What the fake student says to ``user`` under ``system``."""
    if user not in answers:
        return "I do not know."
    ref = answers[user]
    answer = ref if bucket(user) < student_skill(system) else _wrong(ref)
    reasoning = f"Let me think about it. There are {len(user.split())} words in the problem."
    if "final_answer" in system:  # GEPA's JSON format: a fenced object, then chatter
        return f'{reasoning}\n```json\n{{"final_answer": {json.dumps(answer)}}}\n```\nHope this helps.'
    if "####" in system:
        return f"{reasoning}\n#### {answer}"
    if "answer:" in system.lower():
        return f"{reasoning}\nAnswer: {answer}"
    return f"{reasoning}\nThe answer is {answer} (found in 2 steps)."


_RAW_USAGE = "\x00raw usage\x00"  # replaced by ``usage_json`` in the bytes sent


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a client that hung up
            super().handle_error(request, client_address)


class FakeStudentServer:
    """A threaded local HTTP student (context manager). ``url`` is the ``.../v1`` base URL."""

    def __init__(self, answers: Mapping[str, str], *, latency_s: float = 0.0, fail_first: int = 0,
                 fail_status: int = 500, fail_marker: str | None = None, port: int = 0, usage_json: str | None = None,
                 reply_text: str | None = None) -> None:
        self.answers = dict(answers)
        self.latency_s = float(latency_s)
        self.fail_first = int(fail_first)
        self.fail_status = int(fail_status)
        self.fail_marker = fail_marker
        self.usage_json = usage_json
        self.reply_text = reply_text
        self.hits: Counter[tuple[str, str]] = Counter()
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are written apart: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._send(400, {"error": {"message": "bad JSON"}})
                status, doc = outer._answer(self.path, body)
                self._send(status, doc)

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                if outer.usage_json is not None:
                    data = data.replace(json.dumps(_RAW_USAGE).encode(), outer.usage_json.encode())
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

        self._server = _QuietServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = path.split("?", 1)[0]
        if path == "/v1/chat/completions":
            msgs = body.get("messages") or []
            system = "".join(str(m.get("content", "")) for m in msgs if m.get("role") == "system")
            user = "".join(str(m.get("content", "")) for m in msgs if m.get("role") == "user")
        elif path == "/v1/messages":
            system = str(body.get("system") or "")
            user = "".join(str(m.get("content", "")) for m in body.get("messages") or [] if m.get("role") == "user")
        else:
            return 404, {"error": {"message": f"no route {path}"}}
        with self._lock:
            self.requests += 1
            n = self.requests
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            if n <= self.fail_first:
                return 429, {"error": {"message": "rate limited (fake)"}}
            if self.fail_marker is not None and self.fail_marker in user:
                return self.fail_status, {"error": {"message": "server error (fake)"}}
            with self._lock:
                self.hits[(system, user)] += 1
            text = fake_reply(system, user, self.answers) if self.reply_text is None else self.reply_text
            tin, tout = len((system + user).split()), len(text.split())
            usage: Any = _RAW_USAGE if self.usage_json is not None else None
            if path == "/v1/messages":
                return 200, {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": body.get("model", ""),
                             "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                             "stop_sequence": None, "usage": usage or {"input_tokens": tin, "output_tokens": tout}}
            return 200, {"id": f"cmpl-{n}", "object": "chat.completion", "model": body.get("model", ""),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}],
                         "usage": usage or {"prompt_tokens": tin, "completion_tokens": tout,
                                            "total_tokens": tin + tout}}
        finally:
            with self._lock:
                self.in_flight -= 1

    def paid_hits(self) -> int:
        """Answered (200) requests so far."""
        with self._lock:
            return sum(self.hits.values())

    def start(self) -> FakeStudentServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-student", daemon=True)  # close() waits one poll
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeStudentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_synthetic_gsm8k(folder: str | Path, *, n_train: int = 120, n_test: int = 40) -> Path:
    """A GSM8K-format folder (``train.jsonl``, ``test.jsonl``) of simple generated problems."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, n, offset in (("train.jsonl", n_train, 0), ("test.jsonl", n_test, 10_000)):
        with (folder / name).open("w") as fh:
            for i in range(n):
                a, b = 3 + (i * 7 + offset) % 50, 2 + (i * 13 + offset) % 40
                q = f"Problem {offset + i}: Sam has {a} apples and buys {b} more. How many apples does Sam have?"
                fh.write(
                    json.dumps(
                        {"question": q, "answer": f"Sam has {a} + {b} = <<{a}+{b}={a + b}>>{a + b}.\n#### {a + b}"}
                    )
                    + "\n"
                )
    return folder


def gsm8k_answer_key(folder: str | Path) -> dict[str, str]:
    """question -> final number of a GSM8K-format folder (both files)."""
    key = {}
    for name in ("train.jsonl", "test.jsonl"):
        for line in Path(folder, name).read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                key[rec["question"]] = rec["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    return key


def write_jsonl_sample(path: str | Path, n: int = 60) -> Path:
    """A small JSONL file (``question``/``label`` fields, text answers) for ``prompt/jsonl-v1``."""
    path = Path(path)
    colours = ["red", "green", "blue", "yellow", "purple", "orange"]
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"question": f"Item {i}: what colour is object {i * 7 % 31}?",
                                 "label": f"{colours[i % len(colours)]} {i}"}) + "\n")
    return path


def conformance_data(gsm8k_folder: str | Path, scratch: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Parameters for checking each built-in prompt task offline, and the fake student's answer key.

    GSM8K uses ``gsm8k_folder`` when it holds the data (else a synthetic GSM8K-format folder in
    ``scratch``); ``prompt/jsonl-v1`` uses a small generated file.
    """
    folder = Path(gsm8k_folder)
    if not ((folder / "train.jsonl").is_file() and (folder / "test.jsonl").is_file()):
        folder = write_synthetic_gsm8k(Path(scratch) / "gsm8k", n_train=1100, n_test=50)
    jsonl = write_jsonl_sample(Path(scratch) / "sample.jsonl")
    answers = gsm8k_answer_key(folder)
    for line in jsonl.read_text().splitlines():
        rec = json.loads(line)
        answers[rec["question"]] = rec["label"]
    params = {
        "gsm8k/v1": {"data_dir": str(folder), "concurrency": 16},
        "prompt/jsonl-v1": {"path": str(jsonl), "input_field": "question", "answer_field": "label",
                            "n_train": 20, "n_validation": 20},
    }
    return params, answers
