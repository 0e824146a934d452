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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from reasearch.engine.protocol import SandboxRunner, Status
from reasearch.errors import ConfigError
from reasearch.evaluators.base import CandidateKind, Task
from reasearch.evaluators.kind_options import PromptOptions
from reasearch.evaluators.params import Parametrized, Range, TaskParams, meta
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


@dataclass(frozen=True, slots=True)
class StudentParams(TaskParams):
    """What every prompt task takes: its student and the splits it draws (each family adds its data's own)."""

    keep_given_numbers: ClassVar[bool] = True  # spec.params has always recorded numbers as given (an int stays one)

    student: str | None = field(default=None, kw_only=True, metadata=meta(
        "the student model, openai/NAME, anthropic/NAME or a bare (Anthropic) name."))
    base_url: str | None = field(default=None, kw_only=True, metadata=meta(
        "the student's endpoint (an OpenAI-compatible .../v1 URL for openai/)."))
    api_key_env: str | None = field(default=None, kw_only=True, metadata=meta(
        "the environment variable holding the student's API key."))
    concurrency: int = field(default=8, kw_only=True, metadata=meta("student calls in flight at once.", Range(ge=1)))
    temperature: float = field(default=0.0, kw_only=True, metadata=meta(
        "the student's sampling temperature.", Range(ge=0)))
    max_tokens: int = field(default=1024, kw_only=True, metadata=meta(
        "output tokens of one student reply.", Range(ge=1)))
    timeout_s: float = field(default=60.0, kw_only=True, metadata=meta("seconds one student call may take."))
    retries: int = field(default=4, kw_only=True, metadata=meta(
        "retries of a failed student call (overload, rate limit, refused connection).", Range(ge=0)))
    backoff_s: float = field(default=1.0, kw_only=True, metadata=meta(
        "first backoff between retries (doubles each time).", Range(ge=0)))
    price_in: float | None = field(default=None, kw_only=True, metadata=meta(
        "USD per million input tokens of the student (models without a list price).", Range(ge=0)))
    price_out: float | None = field(default=None, kw_only=True, metadata=meta(
        "USD per million output tokens of the student.", Range(ge=0)))
    n_train: int = field(default=100, kw_only=True, metadata=meta(
        "examples of the train split (shown to the agent).", Range(ge=1)))
    n_validation: int = field(default=100, kw_only=True, metadata=meta(
        "examples of the validation split (what an evaluation scores).", Range(ge=1)))
    n_test: int | None = field(default=None, kw_only=True, metadata=meta(
        "examples of the sealed test split (None: all of them).", Range(ge=1)))
    split_seed: int = field(default=0, kw_only=True, metadata=meta(
        "seed of the shuffle that draws the splits.", Range(ge=0)))


SP = TypeVar("SP", bound=StudentParams)


class PromptTask(Parametrized[SP], Task):
    """Base of prompt tasks (subclasses load the data and define answer extraction and metric).

    Student parameters (shared by every prompt task): :class:`StudentParams`; each family's declaration adds
    its data's (:class:`Gsm8kParams`, :class:`JsonlParams`).
    """

    harness = None
    candidate_kind: ClassVar[CandidateKind] = "prompt"
    candidate_file: ClassVar[str] = "prompt.txt"
    SEED_PROMPT: ClassVar[str] = "You are a helpful assistant. Answer the question."

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
        p = self.params
        return TaskSpec(id=task_id, version=1, direction="maximize", time_limit_s=float(p.timeout_s), memory_mb=0,
                        best_known=None, entry_point="system_prompt", deterministic=float(p.temperature) == 0.0,
                        seed_score=None, params=self.get_params())

    def student_spec(self) -> StudentSpec:
        """The student of this task; ConfigError when none is configured."""
        p = self.params
        if not p.student:
            raise ConfigError(f"{self.spec.id} needs a student model: pass student='openai/NAME' (with base_url) or "
                              "'anthropic/NAME' (reasearch: --student MODEL [--base-url URL])")
        return StudentSpec.parse(p.student, base_url=p.base_url, api_key_env=p.api_key_env,
                                 timeout_s=float(p.timeout_s), retries=int(p.retries),
                                 backoff_s=float(p.backoff_s), concurrency=int(p.concurrency),
                                 price_in=p.price_in, price_out=p.price_out)

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
        p = self.params
        n_test = "all" if p.n_test is None else str(p.n_test)
        return (
            f"{what}\n\n"
            "The candidate is the student's system_prompt: plain text sent as the system message with every "
            f"input (at most {MAX_PROMPT_CHARS} characters). The student ({p.student or 'not configured'}) "
            f"answers each input; the score is its accuracy ({self.metric_name()}), to maximize.\n"
            f"Splits (fixed seed {p.split_seed}): train ({p.n_train} examples; you see inputs, reference "
            f"answers, student outputs and correctness), validation ({p.n_validation}; aggregate accuracy "
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
        return [StudentRequest(model, prompt, ex.input, float(self.params.temperature), int(self.params.max_tokens), 0)
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
        return {"student_calls": float(self.params.n_validation)}

    def evaluation_costs(self, result: EvalResult) -> dict[str, float]:
        metrics = dict(result.metrics)
        costs = {"student_calls": float(metrics.get("calls_paid", 0))}
        if metrics.get("cost_usd"):
            costs["dollars"] = float(metrics["cost_usd"])
        return costs


@dataclass(frozen=True, slots=True)
class Gsm8kParams(StudentParams):
    """The parameters of ``gsm8k/v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "gsm8k"

    n_train: int = field(default=500, kw_only=True, metadata=meta(
        "examples of the train split (shown to the agent).", Range(ge=1)))
    n_validation: int = field(default=500, kw_only=True, metadata=meta(
        "examples of the validation split (what an evaluation scores).", Range(ge=1)))
    data_dir: str | None = field(default=None, kw_only=True, metadata=meta(
        "the folder holding the data files (default: the shared data folder)."))
    answer: str | None = field(default=None, kw_only=True, metadata=meta(
        "an answer rule replacing the default (see metrics.apply_answer_rule): after-####, last-number, json:FIELD, "
        "exact, normalized-exact, token-f1.", recorded_at_default=False))

    def __post_init__(self) -> None:
        TaskParams.__post_init__(self)  # zero-argument super() does not work in a slots dataclass (Python < 3.14)
        _check_rule(self.answer)


class Gsm8kTask(PromptTask[Gsm8kParams]):
    """``gsm8k/v1``: grade-school math word problems (Cobbe et al. 2021), the paper's protocol.

    Train and validation: ``n_train`` and ``n_validation`` problems (500 each) drawn, after a shuffle
    with ``split_seed``, from ``train.jsonl``; test: ``test.jsonl`` (all 1,319 unless ``n_test``). The
    metric is exact match of the final number: the first number after the reply's last ``####``, else
    its last number, against the number after ``####`` in the reference. ``answer`` takes the answer rules
    of ``prompt/jsonl-v1`` instead (e.g. ``json:final_answer`` for GEPA's published JSON-answer prompts,
    whose replies end in chatter after the object, so that the last number is not the answer); the text
    rules read what follows the reply's last ``Answer:``.

    Parameters: :class:`Gsm8kParams`.
    """

    SEED_PROMPT = "You are a helpful assistant. Solve the math word problem."

    def _make_spec(self) -> TaskSpec:
        return self._spec("gsm8k/v1")

    def metric_name(self) -> str:
        return "exact match of the final number" if self.params.answer is None else f"answer={self.params.answer}"

    def describe(self) -> str:
        rule = ("The final number of the student's reply is the first number after its last '####', or else the "
                "last number it writes: the prompt should make the student reason and then end with '#### <number>'."
                if self.params.answer is None else
                _rule_text(str(self.params.answer), "Answer:", "") + " Answers inside fenced code blocks count only "
                "when the reply has none outside them; when there are several, the last one counts.")
        return self._describe_common(
            "GSM8K: grade-school math word problems. Each input is one problem; the reference answer is a "
            f"number. {rule}")

    def _load(self) -> Splits:
        folder = gsm8k_dir(self.params.data_dir)
        pool = [(q, gsm8k_reference(a), a) for q, a in read_jsonl(folder / "train.jsonl", "question", "answer")]
        test = [(q, gsm8k_reference(a), a) for q, a in read_jsonl(folder / "test.jsonl", "question", "answer")]
        return _splits(pool, test, self.params)

    def judge_one(self, reply_text: str, example: Example) -> tuple[str, float, str]:
        if self.params.answer is not None:
            return _judge_by_rule(str(self.params.answer), reply_text, example.answer, "Answer:")
        pred = extract_final_number(reply_text, "####")
        if pred is None:
            return "no_answer", 0.0, ""
        ref = number_value(example.answer)
        ok = ref is not None and pred == ref
        return ("correct" if ok else "wrong_answer"), (1.0 if ok else 0.0), plain_number(pred)


@dataclass(frozen=True, slots=True)
class JsonlParams(StudentParams):
    """The parameters of ``prompt/jsonl-v1`` (constructor, ``--params`` and ``spec.params`` come from here)."""

    family: ClassVar[str] = "prompt/jsonl"

    path: str | None = field(default=None, kw_only=True, metadata=meta("the JSONL file (one object per line)."))
    input_field: str = field(default="input", kw_only=True, metadata=meta(
        "the field holding the input text (default input)."))
    answer_field: str = field(default="answer", kw_only=True, metadata=meta(
        "the field holding the reference answer (default answer)."))
    metric: str = field(default="normalized_exact", kw_only=True, metadata=meta(
        "exact, normalized_exact, numeric or token_f1 (the score is the mean metric value; an example is correct "
        "when it is 1).", Range(choices=tuple(METRICS))))
    answer_prefix: str = field(default="Answer:", kw_only=True, metadata=meta(
        "the prediction is what follows the reply's last answer_prefix on its line, else the reply's last non-empty "
        "line."))
    test_path: str | None = field(default=None, kw_only=True, metadata=meta(
        "a separate test file; default: the examples left after train and validation."))
    answer: str | None = field(default=None, kw_only=True, metadata=meta(
        "an answer rule that replaces metric (see metrics.apply_answer_rule): after-####, last-number, json:FIELD, "
        "exact, normalized-exact, token-f1."))
    context_field: str | None = field(default=None, kw_only=True, metadata=meta(
        "a field with supporting text shown before the question (a string, a list of strings, HotpotQA's "
        '[[title, [sentences]], ...] or {"title": [...], "sentences": [...]}).'))

    def __post_init__(self) -> None:
        TaskParams.__post_init__(self)  # zero-argument super() does not work in a slots dataclass (Python < 3.14)
        _check_rule(self.answer)


class JsonlPromptTask(PromptTask[JsonlParams]):
    """``prompt/jsonl-v1``: a user's JSONL data with an input field, an answer field and a named metric.

    Parameters: :class:`JsonlParams`.
    """

    SEED_PROMPT = "You are a helpful assistant. Answer the question. End with a line 'Answer: <answer>'."

    def _make_spec(self) -> TaskSpec:
        return self._spec("prompt/jsonl-v1")

    def metric_name(self) -> str:
        return str(self.params.metric) if self.params.answer is None else f"answer={self.params.answer}"

    def describe(self) -> str:
        p = self.params
        name = os.path.basename(str(p.path or '(no path given)'))
        context = (f" Each input starts with supporting context (the {p.context_field!r} field: paragraphs, "
                   "some of them distractors), then the question." if p.context_field else "")
        rule = _rule_text(None if p.answer is None else str(p.answer), str(p.answer_prefix), str(p.metric))
        return self._describe_common(
            f"Answer the inputs of {name}.{context} {rule} Answers inside fenced code blocks count only when the "
            "reply has none outside them; when there are several, the last one counts.")

    def _load(self) -> Splits:
        p = self.params
        if not p.path:
            raise ConfigError("prompt/jsonl-v1 needs a data file: -p path=FILE.jsonl (and input_field, answer_field)")
        ctx = p.context_field
        pool = [(i, a, a) for i, a in read_jsonl(p.path, p.input_field, p.answer_field, context_field=ctx)]
        test = None
        if p.test_path:
            test = [(i, a, a) for i, a in read_jsonl(p.test_path, p.input_field, p.answer_field, context_field=ctx)]
        return _splits(pool, test, self.params)

    def judge_one(self, reply_text: str, example: Example) -> tuple[str, float, str]:
        if self.params.answer is not None:
            return _judge_by_rule(str(self.params.answer), reply_text, example.answer, str(self.params.answer_prefix))
        pred = extract_prediction(reply_text, self.params.answer_prefix)
        if not pred:
            return "no_answer", 0.0, ""
        value = float(METRICS[str(self.params.metric)](pred, example.answer))
        kind = "correct" if value >= 1.0 else ("partial" if value > 0 else "wrong_answer")
        return kind, value, pred


def _splits(pool: list[tuple[str, str, str]], test: list[tuple[str, str, str]] | None, p: StudentParams) -> Splits:
    """The three splits of ``pool`` (and a separate ``test``) drawn as the parameters say."""
    return make_splits(pool, test, n_train=int(p.n_train), n_validation=int(p.n_validation),
                       n_test=None if p.n_test is None else int(p.n_test), seed=int(p.split_seed))


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
