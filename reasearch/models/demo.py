"""``DemoModel`` (``--model demo``): a small, real optimizer that plays the agent's part offline.

It needs no API key and no network: it reads the conversation the harness sends and answers with
tool calls, so a new user sees what a run does (``reasearch optimize circle_packing/n26-v1 --model
demo`` improves on the seed in seconds). It uses only the tools the request offers, as any model must:

* program tasks (``evaluate`` on offer): read ``TASK.md`` and the current code, evaluate the seed,
  then repeat "perturb the numeric literals of the best program so far (a few, by small relative
  amounts), evaluate, keep it if the harness says NEW BEST". On circle packing (the task names the
  library's ``optimal_radii`` LP) it first evaluates a program holding n centers in staggered rows of
  near-equal counts as literals, whose radii the LP chooses: the literal perturbations then move
  centers, and every variant gets its best radii.
* prompt tasks (``validate_candidate`` on offer): read the data set's description and ``prompt.txt``,
  validate the seed, then append or replace one instruction from a fixed list, validate, keep the best.
* training tasks (``run_experiment`` on offer): read ``TASK.md`` and ``train.py``, run the seed, then
  write a variant of the best ``train.py`` (first a task-aware edit when the tabular seed's shape is
  there: time features; then numeric literals perturbed), run it, commit it after a NEW BEST; see
  :mod:`reasearch.models._demo_training`.
* When only ``finish`` is offered (the harness's wrap-up turn) or the budget line of the latest state
  snapshot says the budget cannot pay another evaluation, it writes ``lessons.md`` (when it may) and
  finishes with the best candidate.

Contract for requests with NO tools (editor, summarizer and the baseline methods ``evolve``,
``reflect``, ``best-of-n`` rely on it): the reply is text holding exactly one fenced block. It takes
the last fenced block of the latest user message (```python ... ``` or ```text ... ```) and returns a
mutated version in a fence of the same language:

* ``python``: the agent's edit: on circle packing (the request holds the task's description) a program
  not yet in centers + LP form becomes the staggered-rows layout first; then 1-3 numeric literals
  perturbed (float literals by a relative 0.3%, 3% or 10%; when there are none, one integer literal of
  magnitude >= 2 by one), and the result still parses (``ast.parse``); a block with no numeric literal,
  or one that does not parse, comes back unchanged;
* ``text``: one instruction from :data:`INSTRUCTIONS` appended, or one already present replaced;
* GEPA's reflection prompt (its current instructions in an untagged fence): those instructions with one
  instruction appended or replaced, in an untagged fence;
* no fenced block at all: a ```text block holding the first instruction of :data:`INSTRUCTIONS`.

Every choice draws from a generator seeded by a hash: of the whole request when it carries no tools,
else of the demo's own earlier tool calls (the snapshot's clock must not change a choice), and of the
run's seed (0: the demo's original moves), so the same conversation in a run of the same seed always gets
the same reply: runs, resumes and replays are deterministic.

Trust boundary: the conversation may carry text a candidate or a tool produced; it is only parsed
(``ast``, regular expressions, JSON), never executed on the host.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.ast_lock import parse as parse_locked
from reasearch.models._demo_training import experiments, seasonal_edit
from reasearch.models.messages import (
    ModelReply,
    ModelRequest,
    StopReason,
    Usage,
    estimate_tokens,
)
from reasearch.models.reply_text import tagged_fences

__all__ = ["INSTRUCTIONS", "DemoModel", "mutate_python", "mutate_text"]

INSTRUCTIONS = (
    "Think step by step.",
    "Double-check your arithmetic before you answer.",
    "End your reply with a line '#### <answer>' holding only the final answer.",
    "Answer: put the final answer after 'Answer:' on the last line.",
    "Be concise: no more than a few short sentences of reasoning.",
    "Restate what the question asks before you solve it.",
)
_FENCE_TAGS = ("python", "text")  # ```python or ```text opens a block (rest of the line ignored), ``` ends it
_CENTERS_PROGRAM = '''"""Circle packing: fixed centers, radii from the library's LP (written by the demo model)."""

import numpy as np

from reasearch.native.lp import optimal_radii

CENTERS = {centers}


def run():
    centers = np.clip(np.array(CENTERS, dtype=float), 0.0, 1.0)
    return centers, optimal_radii(centers)
'''


def _rng(request: ModelRequest, seed: int = 0) -> random.Random:
    """No tools: seeded by the whole request. With tools: by the demo's own earlier calls (names and
    arguments), so the snapshot's clock and other volatile text cannot change its choices. A run's
    ``seed`` other than 0 is mixed in (seed 0 plays exactly as the demo always did)."""
    if request.tools:
        calls = [[b.get("name"), b.get("input")] for m in request.messages if m.get("role") == "assistant"
                 and isinstance(m.get("content"), list) for b in m["content"] if b.get("type") == "tool_use"]
        blob = json.dumps([calls, sorted(t.name for t in request.tools)], sort_keys=True, default=str)
    else:
        blob = json.dumps([request.system, list(request.messages)], sort_keys=True, default=str)
    if seed:
        blob = json.dumps([seed, blob])
    return random.Random(int(hashlib.sha256(blob.encode()).hexdigest()[:16], 16))


def _float_text(value: float) -> str:
    text = f"{value:.10g}"
    return text if any(c in text for c in ".eEn") else text + ".0"


def mutate_python(source: str, rng: random.Random, *, scale: float = 0.05, count: int = 3) -> str:
    """``source`` with up to ``count`` numeric literals perturbed (see the module's contract); valid Python."""
    try:
        tree = parse_locked(source)
    except SyntaxError:
        return source
    floats: list[tuple[ast.Constant, float]] = []
    ints: list[tuple[ast.Constant, int]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and node.end_col_offset is not None and node.lineno == node.end_lineno):
            continue
        if type(node.value) is float:
            floats.append((node, node.value))
        elif type(node.value) is int and abs(node.value) >= 2:
            ints.append((node, node.value))
    new: dict[int, str] = {}
    if floats:
        for node, value in rng.sample(floats, min(count, len(floats))):
            moved = value * (1.0 + rng.gauss(0.0, scale)) if value else rng.gauss(0.0, scale * 0.1)
            new[id(node)] = _float_text(moved)
        picked = [node for node, _ in floats if id(node) in new]
    elif ints:
        node, value = rng.choice(ints)
        picked, new = [node], {id(node): str(value + rng.choice((-1, 1)))}
    else:
        return source
    lines = source.splitlines(keepends=True)
    for node in sorted(picked, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        line = lines[node.lineno - 1]
        # offsets are in UTF-8 bytes
        raw = line.encode()
        raw = raw[:node.col_offset] + new[id(node)].encode() + raw[node.end_col_offset:]
        lines[node.lineno - 1] = raw.decode()
    out = "".join(lines)
    try:
        parse_locked(out)
    except SyntaxError:
        return source
    return out


def mutate_text(text: str, rng: random.Random) -> str:
    """``text`` with one instruction of :data:`INSTRUCTIONS` appended, or one already present replaced."""
    present = [i for i in INSTRUCTIONS if i in text]
    absent = [i for i in INSTRUCTIONS if i not in text]
    if present and (not absent or rng.random() < 0.3):
        old = rng.choice(present)
        return text.replace(old, rng.choice(absent) if absent else old, 1)
    return text.rstrip() + ("\n" if text.strip() else "") + rng.choice(absent)


@dataclass(frozen=True, slots=True)
class _Step:
    """One tool call of the demo's earlier turns and what it got back."""

    name: str
    input: Mapping[str, Any]
    result: str
    error: bool


_FAILED = re.compile(r"\b(INVALID|TIMEOUT|CRASH|OOM)\b")  # a status a result text names


def _history(messages: Sequence[Mapping[str, Any]]) -> list[_Step]:
    results: dict[str, tuple[str, bool]] = {}
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    content = b.get("content")
                    text = content if isinstance(content, str) else json.dumps(content, default=str)
                    results[str(b.get("tool_use_id"))] = (text, bool(b.get("is_error")))
    steps = []
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use" and str(b.get("id")) in results:
                    text, error = results[str(b["id"])]
                    steps.append(_Step(str(b.get("name")), dict(b.get("input") or {}), text, error))
    return steps


def _latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(str(b.get("text", "")) for b in content or [] if b.get("type") == "text")
    return ""


def _left(snapshot: str, unit: str) -> float | None:
    m = re.search(rf"\b{unit}: ([0-9.]+) left", snapshot)
    return float(m.group(1)) if m else None


class DemoModel:
    """The demo model (see the module docstring for its strategy and its no-tools contract).

    Args:
        name: the model name recorded in provenance.
        seed: the run's seed: runs of different seeds make different moves (0: the demo's original moves).
    """

    def __init__(self, *, name: str = "demo", seed: int = 0) -> None:
        self._name = name
        self.seed = int(seed)
        self._prefix = ""
        self._ids = 0

    @property
    def name(self) -> str:
        return self._name

    def complete(self, request: ModelRequest) -> ModelReply:
        rng = _rng(request, self.seed)
        self._prefix, self._ids = f"{rng.getrandbits(40):010x}", 0  # tool-use ids unique to this request
        tools = {t.name for t in request.tools}
        if not tools:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": self._rewrite(request, rng)}]
        else:
            blocks = self._act(request, tools, rng)
        stop = StopReason.TOOL_USE if any(b["type"] == "tool_use" for b in blocks) else StopReason.END_TURN
        usage = Usage(input_tokens=estimate_tokens(request.system) + estimate_tokens(list(request.messages)),
                      output_tokens=max(1, estimate_tokens(blocks)))
        return ModelReply(tuple(blocks), stop, usage, 0.0, self._name)

    # ------------------------------------------------------------------ no tools: the fenced-block contract
    def _rewrite(self, request: ModelRequest, rng: random.Random) -> str:
        current = _gepa_instructions(_latest_user_text(request.messages))
        if current is not None:  # GEPA's reflection: its current instructions, edited as the agent edits a prompt
            return f"```\n{mutate_text(current, rng).rstrip()}\n```"
        blocks = tagged_fences(_latest_user_text(request.messages), _FENCE_TAGS)  # linear, size-capped
        if not blocks:
            return f"```text\n{INSTRUCTIONS[0]}\n```"
        lang, body = blocks[-1]
        if lang != "python":
            return f"```{lang}\n{mutate_text(body, rng).rstrip()}\n```"
        # A method's proposal gets the edit the agent gets: on circle packing (the task names the LP) a program
        # not yet in centers + LP form becomes the staggered-rows layout; then the agent's perturbation sizes.
        text = _latest_user_text(request.messages)
        m = _CIRCLES.search(request.system + "\n" + text)
        if m is not None and "optimal_radii" in request.system + text and "CENTERS = [" not in body:
            body = _centers_program(int(m.group(1)))
        new = mutate_python(body, rng, scale=rng.choice((0.003, 0.03, 0.1)), count=rng.choice((1, 2, 3)))
        if "<<<<<<< SEARCH" in text and new != blocks[-1][1]:  # the request asks for SEARCH/REPLACE edits
            return _search_replace(blocks[-1][1], new)
        return f"```{lang}\n{new.rstrip()}\n```"

    # ------------------------------------------------------------------ with tools: play the task
    def _call(self, name: str, **arguments: Any) -> dict[str, Any]:
        self._ids += 1
        return {"type": "tool_use", "id": f"demo_{self._prefix}_{self._ids}", "name": name, "input": arguments}

    def _act(self, request: ModelRequest, tools: set[str], rng: random.Random) -> list[dict[str, Any]]:
        steps = _history(request.messages)
        snapshot = _latest_user_text(request.messages)
        if "evaluate" in tools:
            kind, unit, score_tool, arg = "program", "evaluations", "evaluate", "code"
        elif "validate_candidate" in tools:
            kind, unit, score_tool, arg = "prompt", "student_calls", "validate_candidate", "prompt"
        elif "run_experiment" in tools:
            return self._train(steps, snapshot, tools, rng)
        elif tools == {"finish"}:
            return [self._finish(steps, tools, "the run's limit is reached")]
        else:
            return [{"type": "text", "text": "The demo model plays program tasks (evaluate), prompt tasks "
                                             "(validate_candidate) and training tasks (run_experiment) only; it "
                                             "has nothing to do on this task."}]
        if tools == {"finish"}:
            return [*self._lessons(steps, tools, kind), self._finish(steps, tools, "the run's limit is reached")]
        if not steps:  # first turn: read the task and the starting point
            first = [self._call("read_file", path="TASK.md")] if "read_file" in tools else []
            if kind == "program" and "get_current_code" in tools:
                return [*first, self._call("get_current_code")]
            extra = [self._call("get_dataset_info")] if "get_dataset_info" in tools else []
            return [*first, *extra, self._call("read_file", path="prompt.txt")]
        scored = [s for s in steps if s.name == score_tool and not s.error]
        if not scored:
            return [self._call(score_tool)]  # the seed as it is
        best = self._best(steps, score_tool, arg, "; minimize;" in snapshot or "(minimize;" in snapshot)
        left = _left(snapshot, unit)
        cost = 1.0 if kind == "program" else _last_n(scored)
        if left is not None and left < cost:
            return [*self._lessons(steps, tools, kind), self._finish(steps, tools, f"the {unit} budget is spent")]
        # The last affordable evaluation: lessons now, since once the budget is spent the loop offers only finish.
        lessons = self._lessons(steps, tools, kind) if left is not None and left < 2 * cost else []
        if kind == "program" and "optimal_radii" in _task_text(steps) + best:
            move = self._circle_move(steps, snapshot)
            if move is not None:
                return [*lessons, move]
        if kind == "program":
            scale = rng.choice((0.003, 0.03, 0.1))
            return [*lessons,
                    self._call("evaluate", code=mutate_python(best, rng, scale=scale, count=rng.choice((1, 2, 3))))]
        return [*lessons, self._call("validate_candidate", prompt=mutate_text(best, rng))]

    def _train(self, steps: list[_Step], snapshot: str, tools: set[str], rng: random.Random) -> list[dict[str, Any]]:
        """Training tasks (see :mod:`reasearch.models._demo_training`): one experiment at a time."""
        if not steps:
            return [self._call("read_file", path="TASK.md"), self._call("read_file", path="train.py")]
        exps, current = experiments(steps)
        if not current or "write_file" not in tools:
            return [*self._lessons(steps, tools, "training"), self._finish(steps, tools, "train.py cannot be edited")]
        if sum(s.name == "run_experiment" and s.error for s in steps) >= 3:
            return [*self._lessons(steps, tools, "training"),
                    self._finish(steps, tools, "run_experiment keeps failing")]
        running = [e for e in exps if not e.ended]
        if running:
            return [self._call("wait_experiment", step=running[-1].step, timeout_s=600)]
        if not exps:
            return [self._call("run_experiment", description="the seed as it is", wait_s=30)]
        scored = [e for e in exps if e.score is not None and math.isfinite(e.score)]
        minimize = "; minimize;" in snapshot or "(minimize;" in snapshot
        ranked = sorted(scored, key=lambda e: (e.score or 0.0) * (1 if minimize else -1))  # stable: first best wins
        best = ranked[0].source if ranked else exps[0].source
        left = _left(snapshot, "experiments")
        keep = [self._call("git", command=f'commit -am "demo: keep experiment {exps[-1].step} (new best)"')] \
            if "git" in tools and len(exps) > 1 and ranked and ranked[0] is exps[-1] \
            else []
        if left is not None and left < 1:
            return [*keep, *self._lessons(steps, tools, "training"),
                    self._finish(steps, tools, "the experiments budget is spent")]
        tried = {e.source for e in exps}
        new = seasonal_edit(best)
        why = "time features (trend, weekly and yearly Fourier terms), squared columns, 15x epochs"
        if new is None or new in tried:
            new, why = best, ""
            for _ in range(8):
                scale = rng.choice((0.03, 0.1, 0.3))
                new = mutate_python(best, rng, scale=scale, count=rng.choice((1, 2, 3)))
                why = f"numeric literals of the best train.py perturbed (relative scale {scale:g})"
                if new not in tried:
                    break
            if new in tried:
                return [*keep, *self._lessons(steps, tools, "training"),
                        self._finish(steps, tools, "no new variant of the best train.py")]
        lessons = self._lessons(steps, tools, "training") if left is not None and left < 2 else []  # the last one
        return [*keep, *lessons, self._call("write_file", path="train.py", content=new),
                self._call("run_experiment", description=why, wait_s=30)]

    def _best(self, steps: list[_Step], score_tool: str, arg: str, minimize: bool) -> str:
        """The best-scoring candidate so far (else the start). Once the demo has rewritten a program as
        centers + LP radii, only those count: that form is the one its perturbations can improve."""
        current = ""
        for s in steps:
            if not s.error and (s.name == "get_current_code" or (s.name == "read_file" and s.input.get("path") in (
                    "candidate.py", "prompt.txt"))):
                current = _strip_read(s.result) if s.name == "read_file" else s.result
        scored = []
        for s in steps:
            m = re.search(r"^(?:score|accuracy): (-?[0-9.eE+-]+|inf|-inf)", s.result, re.MULTILINE)
            if s.name == score_tool and not s.error and m and "status: OK" in s.result:
                code = str(s.input.get(arg)) if s.input.get(arg) is not None else current
                scored.append((float(m.group(1)), code))
        family = [x for x in scored if "CENTERS = [" in x[1]]
        pool = family or scored
        if not pool:
            return current
        return (min if minimize else max)(pool, key=lambda x: x[0])[1]

    def _circle_move(self, steps: list[_Step], snapshot: str) -> dict[str, Any] | None:
        """Circle packing, once: n circles in staggered rows of near-equal counts, radii from the LP."""
        if any("CENTERS = [" in str(s.input.get("code", "")) for s in steps if s.name == "evaluate"):
            return None
        m = re.search(r"circle_packing/n(\d+)-v", snapshot + _task_text(steps))
        if m is None:
            return None
        return self._call("evaluate", code=_centers_program(int(m.group(1))))

    def _lessons(self, steps: list[_Step], tools: set[str], kind: str) -> list[dict[str, Any]]:
        if "write_file" not in tools:
            return []
        tool = {"program": "evaluate", "training": "run_experiment"}.get(kind, "validate_candidate")
        scored = [s for s in steps if s.name in (tool, "wait_experiment") and not s.error
                  and re.match(r"experiment \d+ \(", s.result)] if kind == "training" else \
            [s for s in steps if s.name == tool and not s.error]
        better = sum("NEW BEST" in s.result for s in scored)
        what = {"program": "evaluations", "training": "experiments"}.get(kind, "validations")
        thing = {"program": "program", "training": "train.py"}.get(kind, "prompt")
        calls = [s for s in steps if s.name in (tool, "wait_experiment")]
        ended = sorted({m.group(1) for s in calls for m in [_FAILED.search(s.result)] if m})
        failed = [s for s in calls if s.error or _FAILED.search(s.result)]
        how = ("fixed centers with radii from the library's LP (reasearch.native.lp.optimal_radii), then small moves "
               "of the centers" if any("optimal_radii" in str(s.input.get("code", "")) for s in scored)
               else f"small relative perturbations of the best {thing}'s numbers"
               + (" after a task-aware edit" if kind == "training" else ""))
        worked = (f"- {how}: {better} of {len(scored)} {what} set a new best (kept only when the score improved)\n\n"
                  if better else "")
        lost = (f"- {len(scored) - better} of {len(scored)} {what} did not beat the best"
                + (f"; {len(failed)} ended {', '.join(ended) or 'in an error'} (see their feedback)" if failed else ""))
        text = (f"# Lessons (demo model)\n\n## What worked\n\n{worked}## What failed (and why)\n\n{lost}\n\n"
                f"## What to try next\n\n- larger structural changes of the best {thing}: the demo only moves numbers "
                f"a little, so it stalls where a new construction is needed\n")
        return [self._call("write_file", path="lessons.md", content=text)]

    def _finish(self, steps: list[_Step], tools: set[str], why: str) -> dict[str, Any]:
        return self._call("finish", reason=f"{why}; the best-scoring candidate is the demo's choice")


_GEPA_HEAD = "I provided an assistant with the following instructions to perform a task for me:\n```\n"


def _gepa_instructions(text: str) -> str | None:
    """The current instructions in GEPA's reflection prompt (its first, untagged fence), else None."""
    start = text.find(_GEPA_HEAD)
    if start < 0 or len(text) > 4 * 1024 * 1024:
        return None
    start += len(_GEPA_HEAD)
    end = text.find("\n```", start)
    return text[start:end] if end >= 0 else None


def _search_replace(old: str, new: str) -> str:
    """SEARCH/REPLACE edits turning ``old`` into ``new``: one per changed line when the line count is kept
    (a perturbation), else one edit of the whole program."""
    a, b = old.rstrip("\n").split("\n"), new.rstrip("\n").split("\n")
    if len(a) != len(b):
        return f"<<<<<<< SEARCH\n{old.rstrip()}\n=======\n{new.rstrip()}\n>>>>>>> REPLACE"
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    return "\n\n".join(f"<<<<<<< SEARCH\n{x}\n=======\n{y}\n>>>>>>> REPLACE" for x, y in pairs)


_CIRCLES = re.compile(r"Circle packing in the unit square, n=(\d+) circles")  # the task's own description


def _centers_program(n: int) -> str:
    """n circles in staggered rows of near-equal counts as literals; the library's LP chooses the radii."""
    k = max(1, round(math.sqrt(n)))
    rows = [n // k + (1 if i >= k - n % k else 0) for i in range(k)]
    centers = [((j + 0.5) / r, (i + 0.5) / k) for i, r in enumerate(rows) for j in range(r)]
    text = "[\n" + "".join(f"    [{x:.9f}, {y:.9f}],\n" for x, y in centers) + "]"
    return _CENTERS_PROGRAM.format(centers=text)


def _task_text(steps: list[_Step]) -> str:
    return "\n".join(s.result for s in steps if s.name == "read_file" and s.input.get("path") == "TASK.md")


def _strip_read(text: str) -> str:
    """read_file's text without its line numbers, when it numbers lines (``   1\\t...``)."""
    lines = text.splitlines()
    if lines and all(re.match(r"^\s*\d+\t", ln) for ln in lines if ln.strip()):
        return "\n".join(re.sub(r"^\s*\d+\t", "", ln) for ln in lines) + "\n"
    return text


def _last_n(scored: list[_Step]) -> float:
    m = re.search(r"\bn=(\d+)", scored[-1].result) if scored else None
    return float(m.group(1)) if m else 1.0
