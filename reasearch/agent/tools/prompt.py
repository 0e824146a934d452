"""Tools of prompt optimization: the agent improves a student model's system prompt.

``get_dataset_info``, ``get_next_minibatch`` (train), ``call_student_model_batch`` (train outputs and
correctness), ``validate_candidate`` (validation: aggregates only), ``analyze_with_model`` (a cheaper
model analyses train examples with their student outputs). The test split is not reachable from any
tool: the harness scores the final prompt on it after the run ends (``on_finish``), and
``reasearch test RUN`` does so again; the agent never sees that score.

Each tool's cost in student calls is known before it runs (its docstring and the snapshot say it): an
example already answered for the same prompt is served from the store for free.
"""

from __future__ import annotations

from typing import Any, ClassVar

from reasearch.agent.snapshot import EvalRecord, best_of, fmt_score
from reasearch.agent.tools.context import ToolContext
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.errors import ConfigError
from reasearch.models.messages import ModelRequest
from reasearch.runs.events import EventKind
from reasearch.runs.prompt_splits import PromptSplits, TrainOutcome, score_test
from reasearch.runs.run import Run

__all__ = ["PromptTools", "PROMPT_AGENT_SYSTEM", "PROMPT_START_MESSAGE", "ANALYST_SYSTEM", "MAX_BATCH"]

MAX_BATCH = 50  # examples per call_student_model_batch / analyze_with_model
_OUTPUT_CHARS = 1500  # of each student output shown to the agent

PROMPT_AGENT_SYSTEM = """\
You are a research agent optimizing the system prompt of a student model. Nobody else decides for you:
you choose what to try, diagnose failures, edit, verify, allocate the budget and decide when to stop.

How you work:
- Files: your workspace holds TASK.md (the task), prompt.txt (the current system prompt) and lessons.md
  (your persistent memory). Use read_file, write_file, list_files.
- Data: get_dataset_info() gives the splits and metric; get_next_minibatch(size) hands you train
  examples (input and reference answer). Train is yours to study; validation is seen only in aggregate;
  the test split is sealed and scored by the harness on your final prompt.
- Try: call_student_model_batch(prompt, example_ids) runs the student on train examples and shows its
  outputs and correctness (one student call per example; repeats are free).
  analyze_with_model(instruction, example_ids) asks a cheaper model to analyse those outputs.
- Validate: validate_candidate(prompt) scores a prompt on the validation split (one student call per
  validation example; a prompt already validated is free) and returns accuracy and counts by failure
  kind. Only validated prompts can be chosen at the end.
- Memory: keep lessons.md up to date; it survives context compactions. compact() restarts the context.
- Every turn you receive a state snapshot: budget left (student calls), best validation accuracy,
  recent validations, what each tool costs, and lessons.md.
- Finish: call finish(reason, candidate_id) with the validated prompt you trust most (not blindly the
  highest score: a prompt overfitted to a few examples generalizes worse), and say why.

Work in small verified steps: look at failures on train, form a hypothesis, change the prompt, check it
on a minibatch, validate, record the lesson.

# The task
{task}
"""

PROMPT_START_MESSAGE = ("Begin. TASK.md holds the task, prompt.txt the starting system prompt, lessons.md your "
                        "memory. Look at train examples and the student's outputs before you change the prompt.")

ANALYST_SYSTEM = """\
You analyse the outputs of a student model on training examples for someone improving the student's
system prompt. Be concrete: name the failure patterns you see (with example ids), what in the prompt
may cause them, and what instruction could fix them. Do not invent examples."""


def _format_outcome(o: TrainOutcome) -> str:
    out = o.output if len(o.output) <= _OUTPUT_CHARS else o.output[:_OUTPUT_CHARS] + " [...cut]"
    verdict = "CORRECT" if o.correct else o.kind.upper()
    return (f"### {o.id}: {verdict}{' (cached)' if o.cached else ''}\ninput: {o.input}\nreference: {o.reference}\n"
            f"prediction: {o.prediction or '-'}\nstudent output:\n{out}")


class PromptTools(AgentDomain):
    """The prompt-optimization toolset of an agent whose run is on a prompt task.

    Args:
        ctx: the tool context (its run must be a stored :class:`~reasearch.runs.Run`).
        splits: the trusted side (default: a :class:`PromptSplits` over the run).
    """

    def __init__(self, ctx: ToolContext, *, splits: PromptSplits | None = None) -> None:
        if splits is None and not isinstance(ctx.run, Run):
            raise ConfigError("prompt tasks need a stored run (reasearch.runs.Run), not an in-memory one")
        super().__init__(ctx)
        self.candidate_file: str = ctx.task.candidate_file
        self.splits = splits if splits is not None else PromptSplits(ctx.run)

    # ------------------------------------------------------------ loop hooks
    system_template: ClassVar[str | None] = PROMPT_AGENT_SYSTEM
    start_message: ClassVar[str] = PROMPT_START_MESSAGE
    current_label: ClassVar[str] = "Current prompt: prompt.txt"

    def max_student_calls(self, name: str, arguments: dict[str, Any]) -> int:
        """The most student calls a call of tool ``name`` with ``arguments`` can spend (known before it runs)."""
        if name == "validate_candidate":
            return len(self.splits.task.examples("validation"))
        if name in ("call_student_model_batch", "analyze_with_model"):
            ids = arguments.get("example_ids") or []
            return len(set(ids)) if isinstance(ids, list) and len(ids) <= MAX_BATCH else 0
        return 0

    def snapshot_lines(self) -> list[str]:
        """Cost of each tool in student calls, shown every turn."""
        n_val = len(self.splits.task.examples("validation"))
        return ["Tool costs in student calls (an example already answered for the same prompt is free): "
                f"validate_candidate <= {n_val}; call_student_model_batch and analyze_with_model <= 1 per example "
                f"(max {MAX_BATCH}); analyze_with_model also spends analyst tokens; get_dataset_info, "
                "get_next_minibatch 0."]

    def on_finish(self, final: dict[str, Any]) -> None:
        """The trusted side scores the final prompt on the sealed test split (recorded, not shown to the agent)."""
        if final.get("candidate") and not self.ctx.run.events(kind=EventKind.TEST_RESULT):
            score_test(self.ctx.run, client=self.splits.client)

    # ------------------------------------------------------------ tools
    def _prompt(self, prompt: str | None) -> str:
        ws, name = self.ctx.workspace, self.candidate_file
        if prompt is None:
            return ws.read_text(name)
        ws.write_text(name, prompt)
        return prompt

    @tool
    def get_dataset_info(self) -> str:
        """Split sizes, metric, student model and sampling settings. Costs nothing."""
        info = self.splits.info()
        lines = [f"{k}: {v}" for k, v in info.items()]
        return "\n".join(lines + ["example ids of train: train-0 .. train-" + str(info["train"] - 1)])

    @tool
    def get_next_minibatch(self, size: int = 8) -> ToolOutput:
        """The next train examples (input and reference answer), cycling through a fixed shuffle. Costs nothing.

        Args:
            size: how many examples (1-50).
        """
        if not 1 <= size <= MAX_BATCH:
            raise ToolError(f"size must be 1..{MAX_BATCH}")
        index = sum(1 for e in self.ctx.run.events(kind=EventKind.TOOL_RESULT)
                    if e.payload.get("name") == "get_next_minibatch" and not e.payload.get("is_error"))
        batch = self.splits.minibatch(index, size)
        text = "\n\n".join(f"### {ex.id}\ninput: {ex.input}\nreference: {ex.reference or ex.answer}" for ex in batch)
        return ToolOutput(f"minibatch {index} ({len(batch)} train examples):\n\n{text}",
                          {"minibatch": {"index": index, "ids": [ex.id for ex in batch]}})

    @tool
    def call_student_model_batch(self, prompt: str, example_ids: list[str]) -> ToolOutput:
        """Runs the student with a system prompt on train examples: outputs and correctness of each.

        Costs one student call per example not already answered for this prompt (at most 50).

        Args:
            prompt: the system prompt to try (prompt.txt is not changed).
            example_ids: train example ids such as "train-3" (1-50).
        """
        outcomes = self._train(prompt, example_ids)
        correct = sum(o.correct for o in outcomes)
        paid = sum(1 for o in outcomes if not o.cached and o.status == "OK")
        head = f"{correct}/{len(outcomes)} correct on train; {paid} student calls paid, {len(outcomes) - paid} free"
        return ToolOutput(head + "\n\n" + "\n\n".join(_format_outcome(o) for o in outcomes),
                          {"train_batch": {"n": len(outcomes), "correct": correct, "paid": paid}})

    def _train(self, prompt: str, example_ids: list[str]) -> list[TrainOutcome]:
        if not example_ids or len(example_ids) > MAX_BATCH:
            raise ToolError(f"give 1..{MAX_BATCH} train example ids")
        try:
            return self.splits.run_train(prompt, list(example_ids), step=self.ctx.state().step)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None

    @tool
    def validate_candidate(self, prompt: str | None = None) -> ToolOutput:
        """Scores a system prompt on the validation split: accuracy and counts by failure kind only.

        Costs one student call per validation example (free when this prompt was validated before).
        The prompt also becomes prompt.txt.

        Args:
            prompt: the system prompt; default: the current prompt.txt.
        """
        text = self._prompt(prompt)
        state = self.ctx.state()
        before = best_of(state.history, self.ctx.task.spec)
        cid, result = self.splits.validate(text, step=state.step, parent=self.ctx.run.lineage_parent(text),
                                           note=f"step {state.step}")
        rec = EvalRecord(state.step, cid, result.status.value, result.score, result.normalized_score, result.cached)
        m = dict(result.metrics)
        lines = [f"validation at step {rec.step}: prompt {cid[:12]}", f"status: {rec.status}"]
        if rec.score is not None:
            lines.append(f"accuracy: {fmt_score(rec.score)}" + (" [cached: cost nothing]" if rec.cached else ""))
            if before is None or rec.score > (before.score or 0.0):
                lines.append("NEW BEST" + (f" (previous {fmt_score(before.score)})" if before else ""))
            else:
                lines.append(f"not better than the best {fmt_score(before.score)} (prompt {before.candidate[:12]})")
        keys = (
            "n",
            "correct",
            "wrong_answer",
            "no_answer",
            "partial",
            "call_failed",
            "refused",
            "calls_paid",
            "calls_cached",
        )
        lines.append("counts: " + ", ".join(f"{k}={m[k]}" for k in keys if k in m))
        if result.status.value != "OK":
            lines.append("feedback: " + result.feedback)
        return ToolOutput("\n".join(lines), {"evaluation": rec.to_dict()})

    @tool
    def analyze_with_model(self, instruction: str, example_ids: list[str], prompt: str | None = None) -> ToolOutput:
        """Has a cheaper analyst model study the student's outputs on train examples and answer an instruction.

        Costs one student call per example not already answered for this prompt (at most 50), plus the
        analyst's tokens (the editor model; --editor-model picks a cheaper one).

        Args:
            instruction: what to look for (e.g. "why are the wrong answers wrong?").
            example_ids: train example ids such as "train-3" (1-50).
            prompt: the system prompt whose outputs are analysed; default: the current prompt.txt.
        """
        if not instruction.strip():
            raise ToolError("give an instruction: what should the analyst look for?")
        text = prompt if prompt is not None else self.ctx.workspace.read_text(self.candidate_file)
        outcomes = self._train(text, example_ids)
        body = (f"System prompt of the student:\n<<<\n{text}\n>>>\n\nTrain examples with the student's outputs:\n\n"
                + "\n\n".join(_format_outcome(o) for o in outcomes) + f"\n\nInstruction: {instruction}")
        request = ModelRequest(ANALYST_SYSTEM, [{"role": "user", "content": [{"type": "text", "text": body}]}])
        reply = self.ctx.complete("editor", request, "analysis_reply")
        correct = sum(o.correct for o in outcomes)
        return ToolOutput(f"analysis of {len(outcomes)} train examples ({correct} correct):\n{reply.text.strip()}",
                          {"analysis": {"n": len(outcomes), "tokens": reply.usage.total}})



