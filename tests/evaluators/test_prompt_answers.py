"""Answer rules of ``prompt/jsonl-v1`` (``-p answer=``) on hostile replies, and HotpotQA-shaped records with a
context field, end to end against the fake student."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reasearch
from reasearch.errors import ConfigError
from reasearch.evaluators.prompt._data import context_text, read_jsonl
from reasearch.evaluators.prompt.metrics import (
    apply_answer_rule,
    check_answer_rule,
    extract_json_field,
    split_code,
)
from reasearch.evaluators.prompt.testing import FakeStudentServer

FENCE = "```"


@pytest.mark.parametrize("rule, reply, reference, value, pred", [
    # after-####: the last marker wins; a marker inside a code block counts only when none is outside
    ("after-####", "#### 5\nwait, recheck\n#### 7", "7", 1.0, "7"),
    ("after-####", "#### 5\nwait, recheck\n#### 7", "5", 0.0, "7"),
    ("after-####", f"{FENCE}python\nprint('#### 99')\n{FENCE}\nSo #### 1,234.", "1234", 1.0, "1234"),
    ("after-####", f"#### 7\n{FENCE}python\nprint('#### 99')  # a check\n{FENCE}", "7", 1.0, "7"),
    ("after-####", f"{FENCE}\n#### 12\n{FENCE}", "12", 1.0, "12"),  # only in a code block: still an answer
    ("after-####", "The answer is 12.", "12", 0.0, ""),  # no marker: no answer (no last-number fallback)
    ("after-####", "#### none", "12", 0.0, ""),
    ("after-####", "#### $-3.50", "-3.5", 1.0, "-3.5"),
    # last-number: the last number outside code; code's numbers are not answers
    ("last-number", f"{FENCE}python\nx = 100\n{FENCE}\nThe answer is 12.", "12", 1.0, "12"),
    ("last-number", f"The answer is 12.\n{FENCE}python\nassert total == 100\n{FENCE}", "12", 1.0, "12"),
    ("last-number", "It is 5. No: 6", "6", 1.0, "6"),
    ("last-number", "no digits at all", "6", 0.0, ""),
    ("last-number", "answer: 1e999", "1", 0.0, "999"),  # the regex's number, never an infinity
    # json:FIELD: fenced JSON, trailing text, several objects (the last with the field), broken JSON
    ("json:final_answer", f'{FENCE}json\n{{"final_answer": "42"}}\n{FENCE}\nHope this helps! {{', "42", 1.0, "42"),
    ("json:final_answer", '{"final_answer": 1} then {"final_answer": 2} and {"other": 3}', "2", 1.0, "2"),
    ("json:final_answer", '{"final_answer": 2.50}', "2.5", 1.0, "2.5"),
    ("json:final_answer", '{"final_answer": "The Eiffel Tower."}', "eiffel tower", 1.0, "The Eiffel Tower."),
    ("json:final_answer", '{"final_answer": true}', "True", 0.0, ""),
    ("json:final_answer", '{"final_answer": [42]}', "42", 0.0, ""),
    ("json:final_answer", '{"final_answer": null}', "42", 0.0, ""),
    ("json:final_answer", '{"final_answer": 42', "42", 0.0, ""),  # unterminated
    ("json:final_answer", '{"answer": 42}', "42", 0.0, ""),  # another field
    ("json:final_answer", "[" * 5000 + '{"final_answer": 1}', "1", 1.0, "1"),
    ("json:final_answer", '{"a": ' * 3000 + "1" + "}" * 3000, "1", 0.0, ""),  # deep nesting: no crash
    # text rules: after the last prefix, else the last line; code blocks as above
    ("exact", "Answer: Paris\nAnswer: Lyon", "Lyon", 1.0, "Lyon"),
    ("exact", "Answer: lyon", "Lyon", 0.0, "lyon"),
    ("normalized-exact", "Answer: The Lyon!", "lyon", 1.0, "The Lyon!"),
    ("normalized-exact", f"Answer: Lyon\n{FENCE}\nAnswer: Paris\n{FENCE}", "Lyon", 1.0, "Lyon"),
    ("normalized-exact", f"{FENCE}\nAnswer: Paris\n{FENCE}", "Paris", 1.0, "Paris"),
    ("token-f1", "Answer: the Eiffel tower", "Eiffel Tower in Paris", pytest.approx(2 / 3), "the Eiffel tower"),
    ("token-f1", "", "x", 0.0, ""),
])
def test_answer_rules_on_hostile_replies(rule: str, reply: str, reference: str, value: float, pred: str) -> None:
    assert apply_answer_rule(rule, reply, reference) == (value, pred)


def test_rules_never_raise_and_stay_cheap_on_huge_replies() -> None:
    junk = "{" * 200_000 + "#### " + "9" * 50 + "```" * 1000
    for rule in ("after-####", "last-number", "json:x", "exact", "normalized-exact", "token-f1"):
        value, _ = apply_answer_rule(rule, junk, "1")
        assert value == 0.0
    assert extract_json_field("{" * 100_000, "x") is not None  # MISSING, without a quadratic scan
    assert split_code("a ```x\ncode``` b")[1] == "code"


@pytest.mark.parametrize("rule", ["json:", "json: ", "last_number", "f1", ""])
def test_unknown_rules_say_which_exist(rule: str) -> None:
    with pytest.raises(ValueError, match="answer must be one of"):
        check_answer_rule(rule)
    with pytest.raises(ConfigError, match="answer must be one of"):
        _ = reasearch.make("prompt/jsonl-v1", path="x.jsonl", answer=rule).spec


def test_context_shapes_become_text(tmp_path: Path) -> None:
    listed = [["Paris", ["Paris is the capital. ", "It is big."]], ["Lyon", ["Lyon is smaller."]]]
    hf = {"title": ["Paris", "Lyon"], "sentences": [["Paris is the capital. ", "It is big."], ["Lyon is smaller."]]}
    assert context_text(listed, "f:1") == context_text(hf, "f:1") == \
        "[Paris] Paris is the capital. It is big.\n[Lyon] Lyon is smaller."
    assert context_text(["a", "b"], "f:1") == "a\nb" and context_text("plain", "f:1") == "plain"
    for bad in (3, [["t", "not a list"]], {"title": ["a"], "sentences": []}, [[1, ["x"]]]):
        with pytest.raises(ConfigError, match="f:1"):
            context_text(bad, "f:1")
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"question": "Which is the capital?", "answer": "Paris", "context": listed}) + "\n"
                    + json.dumps({"question": "q2", "answer": "a"}) + "\n")
    with pytest.raises(ConfigError, match=":2: no field 'context'"):
        read_jsonl(path, "question", "answer", context_field="context")


def _hotpot(path: Path, n: int) -> tuple[Path, dict[str, str]]:
    """HotpotQA-shaped records (distractor paragraphs, short answers) and the fake student's answer key
    (keyed by the input the student receives: context, then the question)."""
    with path.open("w") as fh:
        for i in range(n):
            ctx = [[f"Town {i}", [f"Town {i} lies on river R{i % 7}. "]], [f"Decoy {i}", ["Nothing here."]]]
            fh.write(json.dumps({"id": f"h{i}", "question": f"Which river flows through town {i}?",
                                 "answer": f"river R{i % 7}", "context": ctx, "type": "bridge"}) + "\n")
    key = {q: a for q, a in read_jsonl(path, "question", "answer", context_field="context")}
    return path, key


def test_hotpotqa_records_with_the_json_rule_end_to_end(tmp_path: Path) -> None:
    path, key = _hotpot(tmp_path / "hotpot.jsonl", 60)
    assert all(q.startswith("[Town ") and "\n\nQuestion: Which river" in q for q in key)
    with FakeStudentServer(key) as srv:
        params = {"path": str(path), "input_field": "question", "answer_field": "answer", "context_field": "context",
                  "n_train": 20, "n_validation": 20, "student": "openai/fake", "base_url": srv.url}
        task = reasearch.make("prompt/jsonl-v1", answer="json:final_answer", **params)
        assert "last JSON object" in task.describe() and "context" in task.describe()
        json_prompt = 'Think step by step. Reply with a JSON object {"final_answer": ...}.'
        good = task.evaluate(json_prompt)
        plain = task.evaluate("Think step by step. End with 'Answer: <answer>'.")
        assert good.status.value == "OK" and good.score > 0.5 and good.metrics["no_answer"] == 0
        assert plain.score == 0.0 and plain.metrics["no_answer"] == 20  # no JSON object: no answer
        f1 = reasearch.make("prompt/jsonl-v1", answer="token-f1", **params)
        assert f1.evaluate(json_prompt).score < good.score  # the last line is chatter, not the answer
