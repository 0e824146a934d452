"""Prompt tasks: the candidate is a system prompt for a student model; the score is the student's
accuracy on a split. ``gsm8k/v1`` and the generic ``prompt/jsonl-v1`` (a user's JSONL data).

Splits (fixed seed): **train** (the agent sees inputs, references, student outputs and correctness),
**validation** (the agent sees aggregates only: accuracy and counts by failure kind) and **test**
(sealed: scored only by the trusted side on the final prompt). ``evaluate(prompt)`` scores the
validation split; ``evaluate(prompt, options=PromptOptions(split="test"))`` is for the trusted side only.

The student calls go through a *caller* (``PromptOptions.caller``): by default a direct client (no store,
no budget); in a run, ``reasearch.runs.students.StudentLedger``, which serves repeats from the store and
debits each call.
"""

from __future__ import annotations

import os
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from reasearch.engine.protocol import SandboxRunner, Status
from reasearch.errors import ConfigError
from reasearch.evaluators.base import CandidateKind, Task
from reasearch.evaluators.kind_options import PromptOptions
from reasearch.evaluators.params import Range
from reasearch.evaluators.prompt._data import (
    Example,
    Splits,
    gsm8k_dir,
    gsm8k_reference,
    make_splits,
    read_jsonl,
)
from reasearch.evaluators.prompt._students import (
    DirectCaller,
    StudentClient,
    StudentReply,
    StudentRequest,
    StudentSpec,
    build_student,
)
from reasearch.evaluators.prompt.metrics import (
    METRICS,
    apply_answer_rule,
    check_answer_rule,
    extract_final_number,
    extract_prediction,
    number_value,
    plain_number,
)
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec

__all__ = ["PromptTask", "Gsm8kTask", "JsonlPromptTask", "Judgment", "SPLITS", "FAILURE_KINDS", "MAX_PROMPT_CHARS"]

SPLITS = ("train", "validation", "test")
MAX_PROMPT_CHARS = 20_000
# How an example can end: correct, wrong answer, no answer found in the reply, the call failed
# (timeout or error after retries), or the call was refused (budget spent).
FAILURE_KINDS = ("wrong_answer", "no_answer", "partial", "call_failed", "refused")
_now = time.monotonic  # the clock of an evaluation's wall time (tests replace it)

_FAILED = {Status.TIMEOUT: "call_failed", Status.CRASH: "call_failed", Status.OOM: "call_failed",
           Status.INVALID: "call_failed", Status.REFUSED: "refused"}


@dataclass(frozen=True, slots=True)
class Judgment:
    """How one example went: its kind (``correct`` or a failure kind), the metric value, the
    prediction the metric saw, and the call's status."""

    example_id: str
    kind: str
    value: float
    prediction: str
    status: Status


class PromptTask(Task):
    """Base of prompt tasks (subclasses load the data and define answer extraction and metric).

    Student parameters (shared by every prompt task): ``student`` (``openai/NAME``, ``anthropic/NAME``
    or a bare name), ``base_url``, ``api_key_env``, ``concurrency``, ``temperature``, ``max_tokens``,
    ``timeout_s``, ``retries``, ``backoff_s``, ``price_in``/``price_out`` (USD per million tokens).

    Args:
        student: the student model, ``openai/NAME``, ``anthropic/NAME`` or a bare (Anthropic) name.
        base_url: the student's endpoint (an OpenAI-compatible ``.../v1`` URL for ``openai/``).
        api_key_env: the environment variable holding the student's API key.
        concurrency: student calls in flight at once.
        temperature: the student's sampling temperature.
        max_tokens: output tokens of one student reply.
        timeout_s: seconds one student call may take.
        retries: retries of a failed student call (overload, rate limit, refused connection).
        backoff_s: first backoff between retries (doubles each time).
        price_in: USD per million input tokens of the student (models without a list price).
        price_out: USD per million output tokens of the student.
        n_train: examples of the train split (shown to the agent).
        n_validation: examples of the validation split (what an evaluation scores).
        n_test: examples of the sealed test split (None: all of them).
        split_seed: seed of the shuffle that draws the splits.
        data_dir: the folder holding the data files (default: the shared data folder).
    """

    PARAM_RANGES: ClassVar[Mapping[str, Range]] = {  # reasearch tasks ID --params shows them
        "concurrency": Range(ge=1), "temperature": Range(ge=0), "max_tokens": Range(ge=1), "retries": Range(ge=0),
        "backoff_s": Range(ge=0), "price_in": Range(ge=0), "price_out": Range(ge=0), "n_train": Range(ge=1),
        "n_validation": Range(ge=1), "n_test": Range(ge=1), "split_seed": Range(ge=0)}

    harness = None
    candidate_kind: ClassVar[CandidateKind] = "prompt"
    candidate_file: ClassVar[str] = "prompt.txt"
    SEED_PROMPT: ClassVar[str] = "You are a helpful assistant. Answer the question."

    # -- parameters every prompt task takes (set by subclasses' __init__ through _student_params)
    student: str | None
    base_url: str | None
    api_key_env: str | None
    concurrency: int
    temperature: float
    max_tokens: int
    timeout_s: float
    retries: int
    backoff_s: float
    price_in: float | None
    price_out: float | None
    n_train: int
    n_validation: int
    n_test: int | None
    split_seed: int

    def _student_params(self, *, student: str | None, base_url: str | None, api_key_env: str | None,
                        concurrency: int, temperature: float, max_tokens: int, timeout_s: float, retries: int,
                        backoff_s: float, price_in: float | None, price_out: float | None, n_train: int,
                        n_validation: int, n_test: int | None, split_seed: int) -> None:
        self.student, self.base_url, self.api_key_env = student, base_url, api_key_env
        self.concurrency, self.temperature, self.max_tokens = concurrency, temperature, max_tokens
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.price_in, self.price_out = price_in, price_out
        self.n_train, self.n_validation, self.n_test, self.split_seed = n_train, n_validation, n_test, split_seed

    # ------------------------------------------------------------ subclass hooks
    @abstractmethod
    def _load(self) -> Splits:
        """The task's train, validation and test examples."""

    @abstractmethod
    def judge_one(self, reply_text: str, example: Example) -> tuple[str, float, str]:
        """(kind, metric value, prediction) of one OK reply."""

    @abstractmethod
    def metric_name(self) -> str:
        """The metric's name, as reports and feedback show it."""

    # ------------------------------------------------------------ spec and text
    def _spec(self, task_id: str) -> TaskSpec:
        return TaskSpec(id=task_id, version=1, direction="maximize", time_limit_s=float(self.timeout_s), memory_mb=0,
                        best_known=None, entry_point="system_prompt", deterministic=float(self.temperature) == 0.0,
                        seed_score=None, params=self.get_params())

    def student_spec(self) -> StudentSpec:
        """The student of this task; ConfigError when none is configured."""
        if not self.student:
            raise ConfigError(f"{self.spec.id} needs a student model: pass student='openai/NAME' (with base_url) or "
                              "'anthropic/NAME' (reasearch: --student MODEL [--base-url URL])")
        return StudentSpec.parse(self.student, base_url=self.base_url, api_key_env=self.api_key_env,
                                 timeout_s=float(self.timeout_s), retries=int(self.retries),
                                 backoff_s=float(self.backoff_s), concurrency=int(self.concurrency),
                                 price_in=self.price_in, price_out=self.price_out)

    def student_client(self) -> StudentClient:
        """The student's client (built once per task instance; not pickled)."""
        client = self.__dict__.get("_client")
        if client is None:
            client = self.__dict__["_client"] = build_student(self.student_spec())
        return client

    def splits(self) -> Splits:
        """The three splits (trusted side only; the agent's tools expose train and validation aggregates)."""
        splits = self.__dict__.get("_splits")
        if splits is None:
            splits = self.__dict__["_splits"] = self._load()
        return splits

    def examples(self, split: str) -> tuple[Example, ...]:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {list(SPLITS)}, not {split!r}")
        return getattr(self.splits(), split)

    def seed_program(self) -> str:
        return self.SEED_PROMPT

    def _describe_common(self, what: str) -> str:
        n_test = "all" if self.n_test is None else str(self.n_test)
        return (
            f"{what}\n\n"
            "The candidate is the student's system_prompt: plain text sent as the system message with every "
            f"input (at most {MAX_PROMPT_CHARS} characters). The student ({self.student or 'not configured'}) "
            f"answers each input; the score is its accuracy ({self.metric_name()}), to maximize.\n"
            f"Splits (fixed seed {self.split_seed}): train ({self.n_train} examples; you see inputs, reference "
            f"answers, student outputs and correctness), validation ({self.n_validation}; aggregate accuracy "
            f"and counts by failure kind only), test ({n_test}; sealed: scored by the harness on your final "
            "prompt). The budget unit is one student call; a repeat of the same call is free.")

    # ------------------------------------------------------------ candidates
    def bad_candidates(self) -> dict[str, Any]:
        """Prompts that must end INVALID without any student call (``check_task`` uses these)."""
        return {
            "empty": "",
            "whitespace": " \n\t ",
            "nul_byte": "answer\x00",
            "oversized": "x" * (MAX_PROMPT_CHARS + 1),
            "not_text": 3.5,
        }

    def prompt_problem(self, prompt: Any) -> str | None:
        """Why ``prompt`` is not a valid candidate, or None."""
        if not isinstance(prompt, str):
            return f"the prompt must be text, not {type(prompt).__name__}"
        if not prompt.strip():
            return "the prompt is empty"
        if len(prompt) > MAX_PROMPT_CHARS:
            return f"the prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}"
        if "\x00" in prompt:
            return "the prompt contains a NUL character"
        return None

    def requests(self, prompt: str, examples: Sequence[Example]) -> list[StudentRequest]:
        model = self.student_spec().name
        return [StudentRequest(model, prompt, ex.input, float(self.temperature), int(self.max_tokens), 0)
                for ex in examples]

    # ------------------------------------------------------------ scoring
    def judge(self, examples: Sequence[Example], replies: Sequence[StudentReply]) -> list[Judgment]:
        """One judgment per example (trusted side)."""
        out = []
        for ex, rep in zip(examples, replies, strict=True):
            if rep.status is not Status.OK:
                out.append(Judgment(ex.id, _FAILED.get(rep.status, "call_failed"), 0.0, "", rep.status))
                continue
            try:
                kind, value, pred = self.judge_one(rep.text, ex)
            except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError):
                # the reply is hostile text: one that breaks an answer rule is no answer, never an exception
                kind, value, pred = "no_answer", 0.0, ""
            if not (0.0 <= value <= 1.0):  # a metric's value is in [0, 1]; anything else (NaN) is no answer
                kind, value, pred = "no_answer", 0.0, ""
            out.append(Judgment(ex.id, kind, value, pred, Status.OK))
        return out

    def aggregate(self, judgments: Sequence[Judgment], replies: Sequence[StudentReply], split: str) -> EvalResult:
        """The aggregate result of a split: accuracy and counts by kind; never per-example data.

        A split where any call failed or was refused is not scored (its status is REFUSED, TIMEOUT or
        CRASH, with the counts in the metrics): a failed call never counts as a wrong answer.
        """
        counts = Counter(j.kind for j in judgments)
        n = len(judgments)
        paid = sum(1 for r in replies if r.status is not Status.REFUSED and not r.cached and r.ok)
        metrics: dict[str, Any] = {
            "split": split, "n": n, "correct": counts.get("correct", 0),
            **{k: counts.get(k, 0) for k in FAILURE_KINDS},
            "calls_paid": paid, "calls_cached": sum(1 for r in replies if r.cached),
            "input_tokens": sum(r.input_tokens for r in replies if not r.cached),
            "output_tokens": sum(r.output_tokens for r in replies if not r.cached),
            "cost_usd": sum(r.cost_usd for r in replies if not r.cached),
        }
        failures = Counter(j.status for j in judgments if j.status is not Status.OK)
        if failures:
            status = (Status.REFUSED if Status.REFUSED in failures else
                      Status.TIMEOUT if Status.TIMEOUT in failures else Status.CRASH)
            errors = Counter(r.error.split(":", 1)[0][:60] for r in replies if not r.ok)
            detail = "; ".join(f"{e or 'error'} x{c}" for e, c in errors.most_common(3))
            return EvalResult.failure(status, f"{sum(failures.values())} of {n} student calls did not give an answer "
                                      f"({detail}); the {split} split is not scored (repeat: answered calls are free)",
                                      metrics=metrics)
        accuracy = sum(j.value for j in judgments) / n if n else 0.0
        metrics["accuracy"] = accuracy
        parts = ", ".join(f"{k} {metrics[k]}" for k in ("correct", *FAILURE_KINDS) if metrics[k])
        return self.result(accuracy, metrics=metrics,
                           feedback=f"{split}: accuracy {accuracy:.4f} on {n} examples ({parts})",
                           ).with_(cached=bool(replies) and all(r.cached for r in replies))

    def evaluate(self, candidate_source: Any, *, seed: int | None = None, executor: SandboxRunner | None = None,
                 options: PromptOptions | None = None) -> EvalResult:
        """Scores a system prompt on a split (default validation; aggregates only).

        Args:
            candidate_source: the system prompt.
            seed: recorded in provenance (the splits use ``split_seed``).
            executor: unused (no candidate code runs); accepted for the Task API.
            options: the split (``validation``, or for the trusted side only ``test`` or ``train``) and who
                makes the student calls (default: the student's client, directly).
        """
        opts = options if options is not None else PromptOptions()
        problem = self.prompt_problem(candidate_source)
        source = candidate_source if isinstance(candidate_source, str) else repr(candidate_source)
        prov = self.provenance(source, seed=seed, sandbox_mode="none (prompt task: no candidate code runs)")
        if problem is not None:
            return self.invalid(problem).with_(provenance=prov)
        examples = self.examples(opts.split)
        caller = opts.caller if opts.caller is not None else DirectCaller(self.student_client())
        t0 = _now()
        replies = caller.call_batch(self.requests(candidate_source, examples))
        wall = max(0.0, _now() - t0)  # elapsed, not the sum of latencies: calls run concurrently
        res = self.aggregate(self.judge(examples, replies), replies, opts.split)
        metrics = {**res.metrics, "student_call_s_sum": round(sum(r.wall_s for r in replies), 4)}
        return res.with_(provenance=prov, wall_s=wall, metrics=metrics)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        """Scores raw student outputs for the validation split: a list of one text per example."""
        examples = self.examples("validation")
        if not isinstance(data, list) or len(data) != len(examples) or not all(isinstance(t, str) for t in data):
            got = f"a list of {len(data)}" if isinstance(data, list) else type(data).__name__
            return self.invalid(
                f"expected a list of {len(examples)} output texts (one per validation example), got {got}"
            )
        replies = [StudentReply(Status.OK, t) for t in data]
        return self.aggregate(self.judge(examples, replies), replies, "validation")

    # ------------------------------------------------------------ budget hooks (Run.evaluate)
    def budget_estimate(self) -> dict[str, float]:
        """One validation pass costs at most one student call per validation example."""
        return {"student_calls": float(self.n_validation)}

    def evaluation_costs(self, result: EvalResult) -> dict[str, float]:
        metrics = dict(result.metrics)
        costs = {"student_calls": float(metrics.get("calls_paid", 0))}
        if metrics.get("cost_usd"):
            costs["dollars"] = float(metrics["cost_usd"])
        return costs


_STUDENT_DEFAULTS: dict[str, Any] = dict(
    student=None, base_url=None, api_key_env=None, concurrency=8, temperature=0.0, max_tokens=1024, timeout_s=60.0,
    retries=4, backoff_s=1.0, price_in=None, price_out=None)


class Gsm8kTask(PromptTask):
    """``gsm8k/v1``: grade-school math word problems (Cobbe et al. 2021), the paper's protocol.

    Train and validation: ``n_train`` and ``n_validation`` problems (500 each) drawn, after a shuffle
    with ``split_seed``, from ``train.jsonl``; test: ``test.jsonl`` (all 1,319 unless ``n_test``). The
    metric is exact match of the final number: the first number after the reply's last ``####``, else
    its last number, against the number after ``####`` in the reference. ``answer`` takes the answer rules
    of ``prompt/jsonl-v1`` instead (e.g. ``json:final_answer`` for GEPA's published JSON-answer prompts,
    whose replies end in chatter after the object, so that the last number is not the answer); the text
    rules read what follows the reply's last ``Answer:``.

    Args:
        answer: an answer rule replacing the default (see :func:`.metrics.apply_answer_rule`): ``after-####``,
            ``last-number``, ``json:FIELD``, ``exact``, ``normalized-exact``, ``token-f1``.
    """

    SEED_PROMPT = "You are a helpful assistant. Solve the math word problem."

    def __init__(
        self,
        *,
        student: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        concurrency: int = 8,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 1.0,
        price_in: float | None = None,
        price_out: float | None = None,
        n_train: int = 500,
        n_validation: int = 500,
        n_test: int | None = None,
        split_seed: int = 0,
        data_dir: str | None = None,
        answer: str | None = None,
    ) -> None:
        self._student_params(student=student, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
                             temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s, retries=retries,
                             backoff_s=backoff_s, price_in=price_in, price_out=price_out, n_train=n_train,
                             n_validation=n_validation, n_test=n_test, split_seed=split_seed)
        self.data_dir = data_dir
        self.answer = answer

    def get_params(self) -> dict[str, Any]:
        params = super().get_params()
        if params.get("answer") is None:  # the default rule: the spec (and every cache key) stays as before
            params.pop("answer", None)
        return params

    def _make_spec(self) -> TaskSpec:
        _check_rule(self.answer)
        return self._spec("gsm8k/v1")

    def metric_name(self) -> str:
        return "exact match of the final number" if self.answer is None else f"answer={self.answer}"

    def describe(self) -> str:
        rule = ("The final number of the student's reply is the first number after its last '####', or else the "
                "last number it writes: the prompt should make the student reason and then end with '#### <number>'."
                if self.answer is None else
                _rule_text(str(self.answer), "Answer:", "") + " Answers inside fenced code blocks count only when "
                "the reply has none outside them; when there are several, the last one counts.")
        return self._describe_common(
            "GSM8K: grade-school math word problems. Each input is one problem; the reference answer is a "
            f"number. {rule}")

    def _load(self) -> Splits:
        folder = gsm8k_dir(self.data_dir)
        pool = [(q, gsm8k_reference(a), a) for q, a in read_jsonl(folder / "train.jsonl", "question", "answer")]
        test = [(q, gsm8k_reference(a), a) for q, a in read_jsonl(folder / "test.jsonl", "question", "answer")]
        return make_splits(pool, test, n_train=int(self.n_train), n_validation=int(self.n_validation),
                           n_test=None if self.n_test is None else int(self.n_test), seed=int(self.split_seed))

    def judge_one(self, reply_text: str, example: Example) -> tuple[str, float, str]:
        if self.answer is not None:
            return _judge_by_rule(str(self.answer), reply_text, example.answer, "Answer:")
        pred = extract_final_number(reply_text, "####")
        if pred is None:
            return "no_answer", 0.0, ""
        ref = number_value(example.answer)
        ok = ref is not None and pred == ref
        return ("correct" if ok else "wrong_answer"), (1.0 if ok else 0.0), plain_number(pred)


class JsonlPromptTask(PromptTask):
    """``prompt/jsonl-v1``: a user's JSONL data with an input field, an answer field and a named metric.

    Args:
        path: the JSONL file (one object per line).
        input_field: the field holding the input text (default ``input``).
        answer_field: the field holding the reference answer (default ``answer``).
        metric: ``exact``, ``normalized_exact``, ``numeric`` or ``token_f1`` (the score is the mean
            metric value; an example is correct when it is 1).
        answer_prefix: the prediction is what follows the reply's last ``answer_prefix`` on its line,
            else the reply's last non-empty line.
        test_path: a separate test file; default: the examples left after train and validation.
        answer: an answer rule that replaces ``metric`` (see :func:`.metrics.apply_answer_rule`):
            ``after-####``, ``last-number``, ``json:FIELD``, ``exact``, ``normalized-exact``, ``token-f1``.
        context_field: a field with supporting text shown before the question (a string, a list of
            strings, HotpotQA's ``[[title, [sentences]], ...]`` or ``{"title": [...], "sentences": [...]}``).
    """

    SEED_PROMPT = "You are a helpful assistant. Answer the question. End with a line 'Answer: <answer>'."

    def __init__(
        self,
        *,
        path: str | None = None,
        input_field: str = "input",
        answer_field: str = "answer",
        metric: str = "normalized_exact",
        answer_prefix: str = "Answer:",
        test_path: str | None = None,
        student: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        concurrency: int = 8,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 1.0,
        price_in: float | None = None,
        price_out: float | None = None,
        n_train: int = 100,
        n_validation: int = 100,
        n_test: int | None = None,
        split_seed: int = 0,
        answer: str | None = None,
        context_field: str | None = None,
    ) -> None:
        self._student_params(student=student, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
                             temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s, retries=retries,
                             backoff_s=backoff_s, price_in=price_in, price_out=price_out, n_train=n_train,
                             n_validation=n_validation, n_test=n_test, split_seed=split_seed)
        self.path, self.input_field, self.answer_field = path, input_field, answer_field
        self.metric, self.answer_prefix, self.test_path = metric, answer_prefix, test_path
        self.answer, self.context_field = answer, context_field

    def _make_spec(self) -> TaskSpec:
        if self.metric not in METRICS:
            raise ConfigError(f"metric must be one of {sorted(METRICS)}, not {self.metric!r}")
        _check_rule(self.answer)
        return self._spec("prompt/jsonl-v1")

    def metric_name(self) -> str:
        return str(self.metric) if self.answer is None else f"answer={self.answer}"

    def describe(self) -> str:
        name = os.path.basename(str(self.path or '(no path given)'))
        context = (f" Each input starts with supporting context (the {self.context_field!r} field: paragraphs, "
                   "some of them distractors), then the question." if self.context_field else "")
        rule = _rule_text(None if self.answer is None else str(self.answer), str(self.answer_prefix), str(self.metric))
        return self._describe_common(
            f"Answer the inputs of {name}.{context} {rule} Answers inside fenced code blocks count only when the "
            "reply has none outside them; when there are several, the last one counts.")

    def _load(self) -> Splits:
        if not self.path:
            raise ConfigError("prompt/jsonl-v1 needs a data file: -p path=FILE.jsonl (and input_field, answer_field)")
        ctx = self.context_field
        pool = [(i, a, a) for i, a in read_jsonl(self.path, self.input_field, self.answer_field, context_field=ctx)]
        test = None
        if self.test_path:
            test = [(i, a, a) for i, a in read_jsonl(self.test_path, self.input_field, self.answer_field,
                                                      context_field=ctx)]
        return make_splits(pool, test, n_train=int(self.n_train), n_validation=int(self.n_validation),
                           n_test=None if self.n_test is None else int(self.n_test), seed=int(self.split_seed))

    def judge_one(self, reply_text: str, example: Example) -> tuple[str, float, str]:
        if self.answer is not None:
            return _judge_by_rule(str(self.answer), reply_text, example.answer, str(self.answer_prefix))
        pred = extract_prediction(reply_text, self.answer_prefix)
        if not pred:
            return "no_answer", 0.0, ""
        value = float(METRICS[str(self.metric)](pred, example.answer))
        kind = "correct" if value >= 1.0 else ("partial" if value > 0 else "wrong_answer")
        return kind, value, pred


# ------------------------------------------------------------ answer rules (-p answer=), shared by both tasks
def _check_rule(answer: str | None) -> None:
    if answer is not None:
        try:
            check_answer_rule(str(answer))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _judge_by_rule(rule: str, reply_text: str, reference: str, prefix: str) -> tuple[str, float, str]:
    value, pred = apply_answer_rule(rule, reply_text, reference, prefix=prefix)
    if not pred:
        return "no_answer", 0.0, ""
    return ("correct" if value >= 1.0 else "partial" if value > 0 else "wrong_answer"), value, pred


def _rule_text(answer: str | None, answer_prefix: str, metric: str) -> str:
    """How a reply is judged under ``answer`` (None: ``metric`` on the text after ``answer_prefix``)."""
    prefix = f"follows the reply's last {answer_prefix!r} on its line, else its last non-empty line"
    return {
        None: f"The prediction is what {prefix}; it is compared with the reference by the {metric} metric.",
        "after-####": "The prediction is the first number after the reply's last '####' (no '####': no answer); "
                      "it must equal the reference number.",
        "last-number": "The prediction is the last number in the reply; it must equal the reference number.",
        "exact": f"The prediction is what {prefix}; it must equal the reference exactly.",
        "normalized-exact": f"The prediction is what {prefix}; it must equal the reference after lower-casing "
                            "and removing punctuation and articles.",
        "token-f1": f"The prediction is what {prefix}; the score is its token F1 against the reference "
                    "(partial credit).",
    }.get(answer, f"The prediction is the {str(answer)[5:]!r} field of the last JSON object in the reply that has "
                  "it (text after the object is ignored); numbers must be equal, text equal after normalization.")
