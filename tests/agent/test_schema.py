"""Tool schemas come from signatures and docstrings; arguments are validated before the call."""

from __future__ import annotations

from typing import Literal

import pytest

from reasearch.agent.tools.schema import Tool, ToolArgumentError, parse_docstring, tool, tools_of


def sample(path: str, count: int = 3, ratio: float | None = None, mode: Literal["a", "b"] = "a",
           tags: list[str] | None = None, flag: bool = False) -> str:
    """Does a sample thing.

    Second line of the description.

    Args:
        path: where to look,
            continued on the next line.
        count: how many.
        ratio: a ratio or nothing.
        mode: which mode.
        tags: labels.
        flag: a switch.

    Returns:
        something.
    """
    return f"{path}:{count}:{ratio}:{mode}:{tags}:{flag}"


def test_schema_from_signature_and_docstring() -> None:
    t = Tool.from_function(sample)
    assert t.name == "sample"
    assert t.description == "Does a sample thing.\n\nSecond line of the description."
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "where to look, continued on the next line."},
            "count": {"type": "integer", "description": "how many.", "default": 3},
            "ratio": {"type": "number", "description": "a ratio or nothing."},
            "mode": {"enum": ["a", "b"], "type": "string", "description": "which mode.", "default": "a"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "labels."},
            "flag": {"type": "boolean", "description": "a switch.", "default": False},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    assert t.nullable == frozenset({"ratio", "tags"})


def test_valid_arguments_are_coerced_and_passed() -> None:
    t = Tool.from_function(sample)
    assert t({"path": "x", "count": 2.0, "ratio": 1, "tags": ["a"], "flag": True}) == "x:2:1.0:a:['a']:True"
    assert t({"path": "x", "ratio": None}) == "x:3:None:a:None:False"


@pytest.mark.parametrize("args, fragment", [
    ({}, "missing required argument(s) ['path']"),
    ({"path": "x", "nope": 1}, "unknown argument(s) ['nope']"),
    ({"path": 3}, "argument 'path' must be a string, got int"),
    ({"path": "x", "count": True}, "argument 'count' must be an integer, got True"),
    ({"path": "x", "count": 2.5}, "argument 'count' must be an integer, got 2.5"),
    ({"path": "x", "ratio": "big"}, "argument 'ratio' must be a number"),
    ({"path": "x", "mode": "c"}, "argument 'mode' must be one of ['a', 'b'], got 'c'"),
    ({"path": "x", "tags": ["a", 2]}, "argument 'tags'[1] must be a string"),
    ({"path": "x", "flag": "yes"}, "argument 'flag' must be true or false"),
    (["path"], "arguments must be a JSON object"),
])
def test_bad_arguments_raise_with_a_message(args: object, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as info:
        Tool.from_function(sample)(args)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ToolArgumentError) as info:
        Tool.from_function(sample).validate({"count": "x", "zzz": 1})
    msg = str(info.value)
    assert "unknown argument(s) ['zzz']" in msg and "missing required argument(s) ['path']" in msg
    assert "argument 'count' must be an integer" in msg


def test_docstring_is_required() -> None:
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="needs a docstring"):
        Tool.from_function(undocumented)


def test_parse_docstring_sections() -> None:
    desc, params = parse_docstring("""Summary.

    Args:
        a (int): first.
        b: second
            more.
    Raises:
        ValueError: never.
    """)
    assert desc == "Summary."
    assert params == {"a": "first.", "b": "second more."}


class _Box:
    def __init__(self) -> None:
        self.calls = 0

    @tool
    def bump(self, by: int = 1) -> int:
        """Adds to the counter.

        Args:
            by: amount.
        """
        self.calls += by
        return self.calls

    @tool(name="peek")
    def _peek(self) -> int:
        """Reads the counter."""
        return self.calls

    def not_a_tool(self) -> None:
        """Plain method."""


def test_tools_of_binds_methods_and_uses_names() -> None:
    box = _Box()
    tools = tools_of(box)
    assert sorted(tools) == ["bump", "peek"]
    assert tools["bump"]({"by": 2}) == 2
    assert tools["peek"]({}) == 2
    assert "self" not in tools["bump"].input_schema["properties"]
    with pytest.raises(TypeError, match="two tools are named"):
        tools_of(box, _Box())
