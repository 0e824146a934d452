"""The prompts of the three roles (agent, editor, summarizer). Plain text, kept in one place."""

from __future__ import annotations

__all__ = [
    "CONTINUE_MESSAGE",
    "EDITOR_SYSTEM",
    "LESSONS_TEMPLATE",
    "NO_TOOL_NUDGE",
    "RETRY_CUT",
    "RETRY_EMPTY",
    "START_MESSAGE",
    "SUMMARY_REQUEST",
    "agent_system",
    "no_tool_warning",
    "editor_request",
    "wrap_up_notice",
]

_AGENT = """\
You are a research agent optimizing a candidate program. Nobody else decides for you: you choose what
to evaluate, diagnose failures, edit, verify, allocate the budget and decide when to stop.

How you work:
- Files: your workspace holds TASK.md (the task), candidate.py (the current program) and lessons.md
  (your persistent memory). Use read_file, write_file, list_files. python_exec and bash run in a
  sandbox with the workspace as the only writable directory: use them for quick experiments.
- Evaluate: evaluate() scores candidate.py (or the code you pass) on the trusted evaluator and costs
  one unit of evaluation budget; an identical program already evaluated is served from the cache for
  free. Only OK results have a score: failures never count.
- Edit: write_file('candidate.py', ...) or edit_code(instruction), which has another model rewrite the
  whole file (costs tokens, not evaluations). get_current_code() shows the program.
- Memory: keep lessons.md up to date with what worked, what failed (and why), and what to try next.
  It survives context compactions and later runs; the context itself does not. compact() saves the
  transcript and restarts the context from a summary when it gets long.
- Every turn you receive a state snapshot: budget left, best score and candidate, recent evaluations,
  a warning when progress stalls, and lessons.md.
- Finish: call finish(reason, candidate_id) when you are done or the budget is nearly spent. Choose the
  candidate you trust most with the whole history in view (not blindly the single highest score:
  weigh robustness, validity margins, and what you learned), and say why.

Work in small verified steps: form a hypothesis, change one thing, evaluate, record the lesson.

# The task
{task}
"""

EDITOR_SYSTEM = """\
You rewrite a Python program according to an instruction. Answer with the complete new program in a
single ```python fenced block and nothing else: no explanations, no elisions such as "rest unchanged".
Keep the entry point's name and signature."""

SUMMARY_REQUEST = """\
The context is being compacted: this conversation will be replaced by your summary, the state
snapshot and lessons.md. Write the summary now (no tool calls): the key insights so far (what scored,
what failed and why), the current approach and its state, and the unfinished work with concrete next
steps. Be specific (numbers, candidate ids, file names); at most ~600 words."""

START_MESSAGE = ("Begin. TASK.md holds the task, candidate.py the starting program, lessons.md your memory. "
                 "Evaluate before you edit, and record lessons as you go.")

NO_TOOL_NUDGE = ("Your reply called no tool. Act with a tool call (evaluate, edit_code, write_file, ...); "
                 "call finish(reason, candidate_id) when you are done.")

def no_tool_warning(turns: int, limit: int) -> str:
    """The nudge's warning when one more turn without a tool call stops the run."""
    return (f"WARNING: {turns} replies in a row called no tool. If your next reply calls none either, the run "
            f"stops after {limit} such replies and the harness chooses the best candidate for you.")


CONTINUE_MESSAGE = (
    "Your reply was cut off at the output token limit. Continue exactly where it stopped, without repeating anything."
)
RETRY_EMPTY = "Your reply was empty. Answer again: call a tool."
RETRY_CUT = ("Your reply was cut off at the output token limit inside a tool call, so it was discarded. "
             "Answer again with a shorter reply (e.g. smaller edits via edit_code, or split the work).")

LESSONS_TEMPLATE = """\
# Lessons

## What worked

## What failed (and why)

## What to try next
"""


def agent_system(task_description: str) -> str:
    return _AGENT.format(task=task_description.strip())


def wrap_up_notice(reason: str) -> str:
    return (f"LIMIT REACHED: {reason}. This is your last turn and only finish() is available: choose the "
            "final candidate with the whole history in view, and say why.")


def editor_request(task_description: str, source: str, instruction: str) -> str:
    return (f"# Task\n{task_description.strip()}\n\n# Current program\n```python\n{source}\n```\n\n"
            f"# Instruction\n{instruction.strip()}\n\nReturn the complete new program in one ```python block.")
