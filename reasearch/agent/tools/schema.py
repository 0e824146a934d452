"""Typed Python functions as model tools: JSON schema from signature and docstring, validated arguments.

A tool is a function (or method) marked with :func:`tool`. Its JSON schema comes from the type hints
(``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict``, ``Literal[...]``, ``X | None``) and its
Google-style docstring (the summary describes the tool, ``Args:`` describes each parameter). Arguments
are validated before the call; a bad argument or a :class:`ToolError` goes back to the model as an
error result (the loop never breaks on it).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

from reasearch.errors import ReasearchError
from reasearch.models.messages import ToolSchema

__all__ = ["Tool", "ToolArgumentError", "ToolError", "ToolOutput", "parse_docstring", "tool", "tools_of"]

_MARK = "__reasearch_tool__"
_SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Raises|Yields|Examples?|Notes?|Attributes):\s*$")


class ToolError(ReasearchError):
    """A tool could not do what was asked; the message goes back to the model as an error result."""


class ToolArgumentError(ToolError):
    """The model called a tool with arguments that do not match its schema."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's answer: text for the model, and plain data the harness keeps (recorded in the event log)."""

    text: str
    data: Mapping[str, Any] | None = None


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Marks a function or method as a tool (``@tool`` or ``@tool(name="...")``)."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, _MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section, current, indent = None, None, 0
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section, current = m.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments"):
            pm = re.match(r"^(\s+)(\*{0,2}\w+)\s*(?:\([^)]*\))?:\s*(.*)$", line)
            if pm and (current is None or len(pm.group(1)) <= indent):
                indent, current = len(pm.group(1)), pm.group(2).lstrip("*")
                params[current] = pm.group(3).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    return "\n".join(summary).strip(), params


def _schema_of(tp: Any) -> tuple[dict[str, Any], bool]:
    """(JSON schema, nullable) of a type hint."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        if len(args) == 1:
            return _schema_of(args[0])[0], nullable
        return {"anyOf": [_schema_of(a)[0] for a in args]}, nullable
    if origin is Literal:
        values = list(typing.get_args(tp))
        kinds = {type(v) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if kinds == {str}:
            schema["type"] = "string"
        return schema, False
    if origin in (list, tuple, typing.Sequence, typing.Iterable) or tp in (list, tuple):
        item_types = typing.get_args(tp)
        schema = {"type": "array"}
        if item_types and item_types[0] is not Ellipsis:
            schema["items"] = _schema_of(item_types[0])[0]
        return schema, False
    if origin in (dict, typing.Mapping) or tp in (dict,):
        return {"type": "object"}, False
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}, False
    if tp is Any:
        return {}, False
    raise TypeError(f"unsupported tool parameter type {tp!r}")


def _check(value: Any, schema: Mapping[str, Any], where: str) -> Any:
    """The validated (lightly coerced) value; raises ToolArgumentError on a mismatch."""
    if "enum" in schema:
        if value not in schema["enum"]:
            raise ToolArgumentError(f"{where} must be one of {schema['enum']}, got {value!r}")
        return value
    if "anyOf" in schema:
        for sub in schema["anyOf"]:
            try:
                return _check(value, sub, where)
            except ToolArgumentError:
                continue
        raise ToolArgumentError(f"{where} has the wrong type ({type(value).__name__})")
    kind = schema.get("type")
    if kind == "string" and not isinstance(value, str):
        raise ToolArgumentError(f"{where} must be a string, got {type(value).__name__}")
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolArgumentError(f"{where} must be an integer, got {value!r}")
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolArgumentError(f"{where} must be a number, got {value!r}")
        value = float(value)
    if kind == "boolean" and not isinstance(value, bool):
        raise ToolArgumentError(f"{where} must be true or false, got {value!r}")
    if kind == "array":
        if not isinstance(value, list):
            raise ToolArgumentError(f"{where} must be an array, got {type(value).__name__}")
        items = schema.get("items")
        if items:
            value = [_check(v, items, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == "object" and not isinstance(value, dict):
        raise ToolArgumentError(f"{where} must be an object, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Tool:
    """One tool: its schema, and the function that runs it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    fn: Callable[..., Any]
    nullable: frozenset[str]

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        """Builds the schema from ``fn``'s signature, type hints and docstring."""
        name = name or getattr(fn, _MARK, None) or fn.__name__
        description, docs = parse_docstring(fn.__doc__)
        if not description:
            raise TypeError(f"tool {name!r} needs a docstring (it is the model's only description)")
        hints = typing.get_type_hints(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        nullable: set[str] = set()
        for pname, p in inspect.signature(fn).parameters.items():
            if pname == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            schema, is_nullable = _schema_of(hints.get(pname, Any))
            schema = dict(schema)
            if pname in docs:
                schema["description"] = docs[pname]
            if p.default is p.empty:
                required.append(pname)
            elif p.default is not None:
                schema["default"] = p.default
            if is_nullable:
                nullable.add(pname)
            props[pname] = schema
        input_schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        return cls(name, description, input_schema, fn, frozenset(nullable))

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self.input_schema)

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Checked keyword arguments; raises ToolArgumentError listing every problem."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}")
        props = self.input_schema["properties"]
        problems: list[str] = []
        unknown = sorted(set(arguments) - set(props))
        if unknown:
            problems.append(f"unknown argument(s) {unknown}; this tool takes {sorted(props) or 'none'}")
        missing = [r for r in self.input_schema["required"] if r not in arguments]
        if missing:
            problems.append(f"missing required argument(s) {missing}")
        out: dict[str, Any] = {}
        for key, value in arguments.items():
            if key not in props:
                continue
            if value is None and key in self.nullable:
                out[key] = None
                continue
            try:
                out[key] = _check(value, props[key], f"argument {key!r}")
            except ToolArgumentError as exc:
                problems.append(str(exc))
        if problems:
            raise ToolArgumentError(f"{self.name}: " + "; ".join(problems))
        return out

    def __call__(self, arguments: Mapping[str, Any]) -> Any:
        return self.fn(**self.validate(arguments))


def tools_of(*objects: Any) -> dict[str, Tool]:
    """Every ``@tool`` method of the given objects (bound), by name; a duplicate name is an error."""
    out: dict[str, Tool] = {}
    for obj in objects:
        for attr in dir(type(obj)):
            member = getattr(type(obj), attr, None)
            mark = getattr(member, _MARK, None)
            if mark is None:
                continue
            t = Tool.from_function(getattr(obj, attr), mark)
            if t.name in out:
                raise TypeError(f"two tools are named {t.name!r}")
            out[t.name] = t
    return out
