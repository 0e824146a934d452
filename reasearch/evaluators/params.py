"""A task's parameters, read from the task's own declaration so that help and checks cannot drift.

A family declares its parameters once, as a frozen dataclass deriving from :class:`TaskParams` (names, types
and defaults are its fields; ``metadata=meta("meaning", Range(...))`` gives each its one line of meaning and
its range), and its task class derives from :class:`Parametrized` with that dataclass as its type argument.
From that one declaration come the task's constructor (its keyword arguments, checked), ``task.params`` (the
checked, frozen values), ``spec.params`` (:func:`spec_params`), ``reasearch tasks ID --params`` and the checks
``make()`` runs before a task is built: a wrong value is a one-line :class:`~reasearch.errors.ConfigError`
naming the parameter, the value and what it takes.

A class that declares no dataclass (a task package's class or factory) is read from its ``__init__`` signature
(its type hints) and the ``Args:`` section of its docstring (a base class's counts too): names, types, defaults
and meanings, no ranges. Either way, time and memory limits (``*_s`` and ``*_mb``) are > 0 unless declared
otherwise.

What ``spec.params`` (a task's identity and cache key) record is the declaration's values, with three declared
exceptions: ``meta(recorded_at_default=False)`` leaves a parameter out while it has its default, ``meta(
in_spec=False)`` leaves it out always (how a task runs, not what it computes: ARC's set ``workers``), and
``spec_params(params, name=value)`` records a value the task resolved instead of the one given (ARC's ``split``:
None given, the split holding the id recorded). ``get_params()`` returns what was given (what rebuilds the task).

Trust boundary: parameters come from the command line or a spec file (the user), never from a candidate.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from reasearch.errors import ConfigError

__all__ = ["Parametrized", "Range", "TaskParam", "TaskParams", "check_finite", "check_params", "declared_params",
           "describe_params", "given_params", "meta", "shown_value", "spec_params", "unbounded_number"]

MAX_PARAM_INT = 2**63 - 1  # the largest integer a parameter may take (a 64-bit store column, a C long)


@dataclass(frozen=True, slots=True)
class Range:
    """Bounds of a numeric parameter (or the values a text one may take)."""

    ge: float | None = None  # value >= ge
    gt: float | None = None  # value > gt
    le: float | None = None  # value <= le
    choices: tuple[Any, ...] = ()
    lt: float | None = None  # value < lt

    def ok(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        parts = [
            f">= {_num(self.ge)}" if self.ge is not None else "",
            f"> {_num(self.gt)}" if self.gt is not None else "",
            f"<= {_num(self.le)}" if self.le is not None else "",
            f"< {_num(self.lt)}" if self.lt is not None else "",
        ]
        return " and ".join(p for p in parts if p)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_POSITIVE = Range(gt=0)
_TYPE_WORDS = {int: "an integer", float: "a number", str: "text", bool: "true or false"}


@dataclass(frozen=True, slots=True)
class TaskParam:
    """One constructor parameter of a task class."""

    name: str
    types: tuple[type, ...]  # int, float, str, bool; NoneType when None is allowed
    default: Any
    range: Range | None
    meaning: str

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    def type_text(self) -> str:
        words = [_TYPE_WORDS.get(t, t.__name__) for t in self.types if t is not type(None)]
        text = " or ".join(words) or "any value"
        return text + (" or null" if type(None) in self.types else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return type(None) in self.types
        for t in self.types:
            if t is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
                return True
            if t is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
                return True
            if t in (str, bool) and isinstance(value, t):
                return True
            if t not in (int, float, str, bool, type(None)):
                return True  # a type the command line cannot name: the constructor checks it
        return False

    def describe(self) -> str:
        """``an integer >= 2 (default 26)``: what the parameter takes."""
        default = "required" if self.required else f"default {self.default!r}"
        if self.range is not None and self.range.choices:
            return f"{self.range.text()} ({default})"
        rng = self.range.text() if self.range else ""
        return f"{self.type_text()}{' ' + rng if rng else ''} ({default})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_text(), "required": self.required,
                "default": None if self.required else self.default,
                "range": self.range.text() if self.range else "", "meaning": self.meaning}


def _types(hint: Any) -> tuple[type, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for a in typing.get_args(hint) for t in _types(a))
    if hint is None:
        return (type(None),)
    if typing.get_origin(hint) is typing.Literal:
        return tuple(dict.fromkeys(type(a) for a in typing.get_args(hint)))
    return (hint,) if isinstance(hint, type) else (object,)


def _arg_lines(cls: type) -> dict[str, str]:
    """``name -> first line of meaning`` from the ``Args:`` sections of the class and its bases."""
    out: dict[str, str] = {}
    for klass in reversed(getattr(cls, "__mro__", (cls,))):  # a factory function: its own docstring
        doc = inspect.cleandoc((klass.__dict__.get("__doc__") if isinstance(klass, type) else klass.__doc__) or "")
        section = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)*)", doc, re.MULTILINE)
        if not section:
            continue
        for m in re.finditer(
            r"^([ \t]{2,4})(\w+)(?: \([^)]*\))?: (.+(?:\n\1[ \t]+\S.*)*)", section.group(1), re.MULTILINE
        ):
            out[m.group(2)] = " ".join(m.group(3).replace("``", "").split())
    return out


def describe_params(cls: type) -> list[TaskParam]:
    """The parameters of task class ``cls``, in signature order (its declaration's, when it has one)."""
    declaration = getattr(cls, "params_type", None)
    if isinstance(declaration, type) and issubclass(declaration, TaskParams):
        return declared_params(declaration)
    if not isinstance(cls, type):  # an installed task package's factory function: its own signature
        init: Any = cls
    else:
        init = vars(cls).get("__init__") or next(vars(k)["__init__"] for k in cls.__mro__ if "__init__" in vars(k))
    sig = inspect.signature(init)
    try:
        hints = typing.get_type_hints(init)
    except (NameError, TypeError):
        hints = {}
    meanings = _arg_lines(cls)
    out = []
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kinds = _types(hints.get(name, object))
        numeric = bool({int, float} & set(kinds))
        rng = _POSITIVE if numeric and name.endswith(("_s", "_mb")) else None
        out.append(TaskParam(name, kinds, p.default, rng, meanings.get(name, "")))
    return out


def unbounded_number(value: Any, where: str = "") -> str | None:
    """Where ``value`` (a parameter or spec value, lists and mappings walked) holds a number no parameter may
    take: NaN, an infinity, or an integer beyond +-(2**63 - 1); ``"name[2].key = nan"``, or None when none does."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, bool):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            return f"{path or 'the value'} = {v!r}"
        if isinstance(v, int) and abs(v) > MAX_PARAM_INT:
            return f"{path or 'the value'} = an integer of {v.bit_length()} bits"
        if isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else str(k), x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
    return None


def check_finite(given: dict[str, Any], what: str) -> None:
    """A one-line ConfigError when a value of ``given`` is NaN, an infinity or an integer beyond 64 bits."""
    for name, value in given.items():
        bad = unbounded_number(value, name)
        if bad is not None:
            raise ConfigError(f"{what}: {bad}; numbers must be finite (no NaN or infinity) and integers within "
                              f"+-{MAX_PARAM_INT}")


def check_params(cls: type, task_id: str, given: dict[str, Any]) -> None:
    """Raises a one-line ConfigError for an unknown parameter, a value of the wrong type or range, or a number
    that is not finite (NaN, infinities, integers beyond 64 bits, also inside lists and mappings)."""
    params = {p.name: p for p in describe_params(cls)}
    hint = f"`reasearch tasks {task_id} --params` lists them"
    for name, value in given.items():
        p = params.get(name)
        if p is None:
            raise ConfigError(f"{task_id} has no parameter {name!r}; its parameters: {', '.join(params) or 'none'} "
                              f"({hint})")
        checked_value(p, value, task_id, hint)


def checked_value(p: TaskParam, value: object, where: str, hint: str = "") -> object:
    """``value`` as parameter ``p`` keeps it (an integer given for a number becomes a float, a NumPy integer an
    int); a one-line ConfigError naming the parameter, the value and what it takes when it is out of type or
    range, or not finite."""
    check_finite({p.name: value}, f"parameter {p.name} of {where}")
    ok = p.accepts(value)
    if ok and value is not None and p.range is not None and not isinstance(value, bool):
        try:
            ok = bool(p.range.ok(value))
        except TypeError:
            ok = False
    if not ok:
        raise ConfigError(f"parameter {p.name} of {where} takes {p.describe()}, not {shown_value(value)}"
                          + (f" ({hint})" if hint else ""))
    if value is None or isinstance(value, (bool, str)):
        return value
    if int in p.types and isinstance(value, numbers.Integral):
        return int(value)
    if float in p.types and isinstance(value, numbers.Real):
        return float(value)
    return value


def shown_value(value: object) -> str:
    """``repr(value)`` cut to 60 characters, as a one-line error shows a given value."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def meta(meaning: str, value_range: Range | None = None, *, recorded_at_default: bool = True,
         in_spec: bool = True) -> dict[str, object]:
    """A declared parameter's field metadata: ``field(default=26, metadata=meta("number of circles", Range(ge=2)))``.

    ``recorded_at_default=False``: ``spec.params`` leaves the parameter out while it has its default (one added to
    a family after its ids were recorded: the ids it had keep their spec, and every cache key its own).
    ``in_spec=False``: ``spec.params`` never record the parameter, whatever its value: it says how the task runs,
    not what it computes (a thread count, a progress bar), so neither the task's identity nor a cache key depends
    on it. It is checked and listed like any other, and ``get_params()`` returns it.
    """
    return {"help": meaning, "range": value_range, "recorded_at_default": recorded_at_default, "in_spec": in_spec}


@dataclass(frozen=True, slots=True)
class TaskParams:
    """Base of a task family's parameter declaration: a frozen dataclass whose fields are the parameters.

    Constructing one checks every value (type, range, finiteness) and keeps it in its declared type, so a
    declaration that exists holds good values: ``CirclePackingParams(n=1)`` is a one-line ConfigError.
    """

    family: ClassVar[str] = "task"  # named in error messages (a registered id names itself through make())
    #: True: a number is kept as given (an integer for a number stays an integer), as the family's spec.params
    #: recorded it before its declaration existed; False: converted to the declared type.
    keep_given_numbers: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for p in _declared(type(self)):
            given = getattr(self, p.name)
            kept = checked_value(p, given, self.family)
            object.__setattr__(self, p.name, given if self.keep_given_numbers else kept)


def declared_params(declaration: type[TaskParams]) -> list[TaskParam]:
    """The parameters a :class:`TaskParams` dataclass declares, in field order."""
    return list(_declared(declaration))


_DECLARED: dict[type, tuple[TaskParam, ...]] = {}  # a declaration -> its parameters (read once)


def _declared(declaration: type[TaskParams]) -> tuple[TaskParam, ...]:
    if declaration not in _DECLARED:
        _DECLARED[declaration] = _read_declaration(declaration)
    return _DECLARED[declaration]


def _read_declaration(declaration: type[TaskParams]) -> tuple[TaskParam, ...]:
    hints = typing.get_type_hints(declaration)
    out = []
    for f in dataclasses.fields(declaration):
        kinds = _types(hints.get(f.name, object))
        numeric = bool({int, float} & set(kinds))
        default: object = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        rng = f.metadata.get("range") or (_POSITIVE if numeric and f.name.endswith(("_s", "_mb")) else None)
        out.append(TaskParam(f.name, kinds, default, rng, str(f.metadata.get("help", ""))))
    return tuple(out)


def spec_params(params: TaskParams, /, **resolved: object) -> dict[str, object]:
    """The values of a declaration as a task's ``spec.params`` records them (field order).

    Args:
        params: the task's declaration (``task.params``).
        **resolved: values the task resolved from the given ones, recorded instead of them (ARC's ``split``: None
            means "the split holding this id", and the spec records the split found, so a task rebuilt from its
            spec names it). Each must be a declared parameter that the spec records, and is checked like a given
            value (type, range, finiteness).

    Raises:
        ConfigError: a resolved value out of its parameter's type or range.
        ValueError: a resolved name that is not a declared parameter in ``spec.params`` (a task's own mistake).
    """
    fields = [f for f in dataclasses.fields(params) if f.metadata.get("in_spec", True)]
    unknown = sorted(set(resolved) - {f.name for f in fields})
    if unknown:
        raise ValueError(f"{type(params).__name__}: spec_params() resolves only declared parameters that spec.params "
                         f"record, not {unknown}")
    declared = {p.name: p for p in _declared(type(params))}
    out: dict[str, object] = {}
    for f in fields:
        if f.name in resolved:
            given = resolved[f.name]
            kept = checked_value(declared[f.name], given, params.family)
            out[f.name] = given if params.keep_given_numbers else kept
        elif f.metadata.get("recorded_at_default", True) or getattr(params, f.name) != f.default:
            out[f.name] = getattr(params, f.name)
    return out


def given_params(params: TaskParams) -> dict[str, object]:
    """The values of a declaration as given (field order): what rebuilds the task, ``in_spec=False`` ones included,
    a ``recorded_at_default=False`` one left out at its default, nothing resolved."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if f.metadata.get("recorded_at_default", True) or getattr(params, f.name) != f.default}


P = TypeVar("P", bound=TaskParams)


class Parametrized(Generic[P]):
    """A task class whose parameters are a :class:`TaskParams` dataclass (its type argument).

    ``class CirclePackingTask(Parametrized[CirclePackingParams], Task)``: the constructor takes the declared
    fields (those without ``kw_only`` also by position), checks them and keeps them as ``self.params``; an
    unknown or repeated name is a one-line ConfigError like a bad value.
    """

    params_type: ClassVar[type[TaskParams]]
    __signature__: ClassVar[inspect.Signature]  # what help() and inspect.signature() show: the declared parameters
    params: P

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in typing.get_args(base):
                if isinstance(arg, type) and issubclass(arg, TaskParams):
                    cls.params_type = arg
        declaration = cls.__dict__.get("params_type")
        if declaration is not None:  # help(), inspect.signature(): the declared parameters
            fields = sorted(dataclasses.fields(declaration), key=lambda f: bool(f.kw_only))  # as __init__ takes them
            cls.__signature__ = inspect.Signature([
                inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY if f.kw_only else
                                  inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=f.type,
                                  default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
                for f in fields])

    def __init__(self, *args: object, **kwargs: object) -> None:
        declaration = type(self).params_type
        family = declaration.family
        fields = dataclasses.fields(declaration)
        positional = [f.name for f in fields if not f.kw_only]
        if len(args) > len(positional):
            raise ConfigError(f"{family} takes {len(positional)} positional parameter(s) "
                              f"({', '.join(positional) or 'none'}), not {len(args)}; pass parameters by name")
        given: dict[str, object] = dict(zip(positional, args, strict=False))
        names = [f.name for f in fields]
        for name, value in kwargs.items():
            if name not in names:
                raise ConfigError(f"{family} has no parameter {name!r}; its parameters: {', '.join(names)}")
            if name in given:
                raise ConfigError(f"{family}: parameter {name} given twice (by position and by name)")
            given[name] = value
        missing = [f.name for f in fields if f.name not in given and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{family}: parameter {missing[0]} is required (its parameters: {', '.join(names)})")
        self.params = typing.cast(P, declaration(**given))

    def get_params(self) -> dict[str, object]:
        """The declared parameters' values as given (what rebuilds this task; :func:`given_params`)."""
        return given_params(self.params)
