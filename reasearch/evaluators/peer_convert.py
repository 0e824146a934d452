"""``reasearch convert-task``: an OpenEvolve folder whose evaluator has the common shape, in the split form.

The common shape (most published OpenEvolve examples): ``evaluate(program_path)`` loads the program as a module,
calls one of its functions (with literal arguments, or none), and computes its metrics from what that function
returned. Such an evaluator is rewritten into the split form of :mod:`reasearch.evaluators.folder`:

* ``seed.py`` is ``initial_program.py``; the entry point is the function the evaluator called, and its literal
  arguments become the folder's parameters (named as the program's signature names them);
* ``score.py`` holds the evaluator's code as it was, plus ``_metrics_of(returned)``: ``evaluate`` with the loading
  statements removed, ``hasattr(program, "fn")`` true and every ``program.fn(...)`` replaced by the returned value.
  Its ``score(returned, params)`` is ``combined_score`` (else OpenEvolve's average of the numeric metrics); an
  ``error`` text raises, so the candidate gets no score;
* ``description.md`` is ``prompt.system_message`` of ``config.yaml`` (else the program's docstring).

The candidate then runs alone in its sandbox and the evaluator's code runs on the trusted side over plain data:
the candidate cannot touch its own score. What changes: the function runs once per evaluation (a loop of trials in
``evaluate`` sees the same answer each time), timings taken around the call measure nothing, the cascade stages
are not converted, and a returned tuple arrives as a list (turned back into a tuple when the program's function
returns a tuple literal). Anything else is refused with one line saying why.

Trust boundary: the evaluator's code is the user's, read here as text (never run by the converter); the score.py
it becomes runs on the host, as every task folder's does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.ast_lock import literal_eval as literal_eval_locked
from reasearch.ast_lock import parse as parse_locked
from reasearch.errors import ConfigError, TaskFolderError
from reasearch.evaluators.peer_folder import DEFAULT_TIME_S, LAYOUTS, MAX_TIME_S, _read_yaml, _section, peer_folder_kind

__all__ = ["convert_peer_folder"]

_LOADERS = {"module_from_spec", "import_module", "load_module", "exec_module", "spec_from_file_location",
            "SourceFileLoader", "load_source"}
_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


class _NotCommon(Exception):
    """The evaluator is not of the common shape (the message says why)."""


@dataclass(frozen=True)
class _Shape:
    fn: str  # the program function the evaluator calls
    args: dict[str, Any]  # its literal arguments, by the program's parameter names
    module: str  # the evaluator's name for the loaded program
    path_arg: str  # evaluate()'s parameter


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_loader(stmt: ast.stmt, module: str, path_arg: str) -> bool:
    """A statement that only loads the program (``spec = ...(path)``, ``m = module_from_spec(spec)``,
    ``spec.loader.exec_module(m)``, ``sys.modules[...] = m``)."""
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Subscript) and _call_name(t.value) == "modules"
                                            for t in stmt.targets):
        return True
    if not isinstance(value, ast.Call):
        return False
    if _call_name(value) in _LOADERS:
        return True
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    return path_arg in names and _call_name(value) in _LOADERS


def _find_shape(evaluator: str, seed: str) -> tuple[ast.FunctionDef, _Shape]:
    tree = parse_locked(evaluator)
    evaluate = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "evaluate"), None)
    if evaluate is None or len(evaluate.args.args) != 1:
        raise _NotCommon("evaluator.py has no evaluate(program_path) of one parameter")
    path_arg = evaluate.args.args[0].arg
    modules = {t.id for n in ast.walk(evaluate) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
               and _call_name(n.value) in {"module_from_spec", "import_module", "load_module", "load_source"}
               for t in n.targets if isinstance(t, ast.Name)}
    if len(modules) != 1:
        raise _NotCommon("evaluate() does not load the program as one module (module_from_spec / import_module); "
                         "it may run it in a subprocess")
    module = modules.pop()
    loaders = {id(s) for s in ast.walk(evaluate) if isinstance(s, ast.stmt) and _is_loader(s, module, path_arg)}
    attrs: set[str] = set()
    for node in ast.walk(evaluate):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == module:
            attrs.add(node.attr)
    calls = {node.attr for node in ast.walk(evaluate) if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Name) and node.value.id == module}
    hasattr_fns = {c.args[1].value for c in ast.walk(evaluate) if isinstance(c, ast.Call) and _call_name(c) == "hasattr"
                   and len(c.args) == 2 and isinstance(c.args[0], ast.Name) and c.args[0].id == module
                   and isinstance(c.args[1], ast.Constant)}
    fns = calls | {f for f in hasattr_fns if isinstance(f, str)}
    if len(fns) != 1:
        raise _NotCommon(f"evaluate() uses {len(fns)} names of the program ({', '.join(sorted(fns)) or 'none'}); "
                         "the common shape calls one function")
    fn = fns.pop()
    # Every other use of the program module or of program_path is outside the shape.
    allowed: set[int] = set()
    for stmt in ast.walk(evaluate):
        if id(stmt) in loaders:
            allowed.update(id(n) for n in ast.walk(stmt))
    for node in ast.walk(evaluate):
        if isinstance(node, ast.Call) and _call_name(node) == "hasattr":
            allowed.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == module:
            allowed.add(id(node.value))
    for node in ast.walk(evaluate):
        if isinstance(node, ast.Name) and node.id in (module, path_arg) and id(node) not in allowed:
            raise _NotCommon(f"evaluate() uses {node.id!r} at line {node.lineno} beyond loading the program and "
                             f"calling {fn}()")
    args = _literal_args(evaluate, module, fn, seed)
    return evaluate, _Shape(fn=fn, args=args, module=module, path_arg=path_arg)


def _literal_args(evaluate: ast.FunctionDef, module: str, fn: str, seed: str) -> dict[str, Any]:
    """The arguments every call ``module.fn(...)`` passes, by the program's parameter names; one set of literals."""
    seed_fn = next((n for n in parse_locked(seed).body if isinstance(n, ast.FunctionDef) and n.name == fn), None)
    if seed_fn is None:
        raise _NotCommon(f"initial_program.py defines no top-level {fn}(), the function evaluate() calls")
    names = [a.arg for a in seed_fn.args.args]
    required = len(names) - len(seed_fn.args.defaults)
    found: list[dict[str, Any]] = []
    for node in ast.walk(evaluate):
        if not isinstance(node, ast.Call):
            continue
        ref = node.func
        if isinstance(ref, ast.Attribute) and ref.attr == fn and isinstance(ref.value, ast.Name) \
                and ref.value.id == module:
            try:
                pos = [literal_eval_locked(a) for a in node.args]
                kw = {k.arg: literal_eval_locked(k.value) for k in node.keywords if k.arg}
            except ValueError:
                raise _NotCommon(f"evaluate() calls {fn}() with computed arguments (line {node.lineno}); the "
                                 "common shape passes literals") from None
            if len(pos) > len(names) or len(kw) != len(node.keywords):
                raise _NotCommon(f"evaluate() calls {fn}() with arguments its signature cannot name")
            found.append({**dict(zip(names, pos, strict=False)), **kw})
    if not found:  # only passed along (run_with_timeout(program.fn, ...)): called without arguments
        if required:
            raise _NotCommon(f"evaluate() hands {fn} to another function; with required parameters "
                             f"({', '.join(names[:required])}) their values cannot be read")
        return {}
    if any(f != found[0] for f in found):
        raise _NotCommon(f"evaluate() calls {fn}() with different arguments; the common shape calls it one way")
    for name, value in found[0].items():
        if type(value) not in _TYPES:
            raise _NotCommon(f"{fn}()'s argument {name} = {value!r} is not a number, text or boolean")
    return found[0]


class _Rewrite(ast.NodeTransformer):
    """``evaluate`` as ``_metrics_of(returned)`` (see the module docstring)."""

    def __init__(self, shape: _Shape) -> None:
        self.shape = shape

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        if node.name != "evaluate":
            return self.generic_visit(node)
        node.name = "_metrics_of"
        node.args.args[0].arg = "returned"
        return self._body(self.generic_visit(node))

    def _body(self, node: Any) -> Any:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                kept = [s for s in stmts if not _is_loader(s, self.shape.module, self.shape.path_arg)]
                setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        return self._body(node) if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try,
                                                     ast.ExceptHandler)) else node

    def visit_Call(self, node: ast.Call) -> Any:
        ref = node.func
        if isinstance(ref, ast.Attribute) and ref.attr == self.shape.fn and isinstance(ref.value, ast.Name) \
                and ref.value.id == self.shape.module:
            return ast.Name("returned", ast.Load())
        if _call_name(node) == "hasattr" and len(node.args) == 2 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == self.shape.module:
            return ast.Constant(True)
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        if node.attr == self.shape.fn and isinstance(node.value, ast.Name) and node.value.id == self.shape.module:
            stmt = parse_locked("(lambda *args, **kwargs: returned)").body[0]
            return stmt.value if isinstance(stmt, ast.Expr) else stmt
        return self.generic_visit(node)


_SCORE_TAIL = '''

# ----------------------------------------------------------------------------------------------------------------
# Written by `reasearch convert-task`: evaluate() above, rewritten to score what the program's {fn}() returned.
{metrics_of}


def score(returned, params):
    """The converted evaluator's score of one returned value (runs on the trusted side, never in the sandbox)."""
{as_tuple}    result = _metrics_of(returned)
    metrics = getattr(result, "metrics", result)
    if not isinstance(metrics, dict):
        raise TypeError(f"evaluate() gave {{type(metrics).__name__}}, not a dict of metrics")
    error = metrics.get("error")
    if isinstance(error, str) and error.strip():
        raise ValueError(error)
    value = metrics.get("combined_score")
    if value is None:
        numbers = [v for k, v in metrics.items()
                   if k != "error" and isinstance(v, (int, float)) and not isinstance(v, bool)]
        value = sum(numbers) / len(numbers) if numbers else None
    shown = ", ".join(f"{{k}}={{v:.6g}}" for k, v in metrics.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool))
    return {{"score": value, "feedback": shown}}
'''

_TUPLE = """    if isinstance(returned, list):
        returned = tuple(returned)  # {fn}() returns a tuple; the sandbox hands lists back
"""

_OPENEVOLVE_STUB = '''# Written by `reasearch convert-task`: OpenEvolve's result type, where openevolve is absent.
import sys as _sys
import types as _types
try:
    import openevolve.evaluation_result  # noqa: F401
except ImportError:
    class EvaluationResult:
        def __init__(self, metrics, artifacts=None):
            self.metrics, self.artifacts = metrics, dict(artifacts or {{}})

    _module = _types.ModuleType("openevolve.evaluation_result")
    _module.EvaluationResult = EvaluationResult
    _sys.modules.setdefault("openevolve", _types.ModuleType("openevolve"))
    _sys.modules["openevolve.evaluation_result"] = _module
'''


def convert_peer_folder(src: str | Path, out: str | Path) -> Path:
    """Writes the split form (task.toml, description.md, seed.py, score.py) of the OpenEvolve folder ``src`` at
    ``out``.

    Raises:
        ConfigError: ``src`` is not an OpenEvolve folder, its evaluator is not of the common shape (the message
            says why), or ``out`` exists.
    """
    folder, target = Path(src).expanduser(), Path(out).expanduser()
    kind = peer_folder_kind(folder)
    if kind != "openevolve":
        what = "a ShinkaEvolve folder" if kind == "shinka" else "not an OpenEvolve folder"
        raise ConfigError(f"{folder}: {what}; convert-task converts an OpenEvolve folder (initial_program.py + "
                          "evaluator.py) whose evaluate() imports the program and calls one function")
    if target.exists():
        raise ConfigError(f"{target} exists; give a new folder")
    if not target.parent.is_dir():
        raise ConfigError(f"the folder {target.parent} does not exist: create it first (mkdir -p {target.parent})")
    program_name, evaluator_name, config_name = LAYOUTS["openevolve"]
    seed = (folder / program_name).read_text(encoding="utf-8")
    evaluator = (folder / evaluator_name).read_text(encoding="utf-8")
    try:
        evaluate, shape = _find_shape(evaluator, seed)
    except SyntaxError as exc:
        raise TaskFolderError(f"{folder / evaluator_name} line {exc.lineno}: syntax error: {exc.msg}") from None
    except _NotCommon as exc:
        raise ConfigError(f"{folder / evaluator_name}: not the common shape, not converted: {exc}; run the folder "
                          "as it is (its evaluator shares the candidate's jail)") from None
    rewritten = _Rewrite(shape).visit(parse_locked(ast.unparse(evaluate)))
    ast.fix_missing_locations(rewritten)
    seed_tree = parse_locked(seed)
    seed_fn = next(n for n in seed_tree.body if isinstance(n, ast.FunctionDef) and n.name == shape.fn)
    as_tuple = any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple) for n in ast.walk(seed_fn))
    stub = _OPENEVOLVE_STUB.format() if "openevolve" in evaluator else ""
    score = (f'"""score.py of the split form of {folder.name}, written by `reasearch convert-task` from its '
             f'evaluator.py."""\n' + stub + "\n" + evaluator.rstrip() + "\n"
             + _SCORE_TAIL.format(fn=shape.fn, metrics_of=ast.unparse(rewritten),
                                  as_tuple=_TUPLE.format(fn=shape.fn) if as_tuple else ""))
    compile(score, "score.py", "exec")  # what was written parses
    config = _read_yaml(folder / config_name)
    description = _section(config, "prompt").get("system_message")
    if not isinstance(description, str) or not description.strip():
        description = ast.get_docstring(seed_tree) or f"Improve {program_name} so that its evaluator scores it higher."
    timeout = _section(config, "evaluator").get("timeout")
    limit = float(min(timeout, MAX_TIME_S)) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) \
        and timeout > 0 else DEFAULT_TIME_S
    name = re.sub(r"[^a-z0-9_]", "_", folder.resolve().name.lower()) or "task"
    timed = any(word in evaluator for word in ("time.time", "perf_counter", "random"))
    lines = [f"# The split form of {folder.resolve()}, written by `reasearch convert-task` (docs/your-own-task.md).",
             f'id = "{name}/split-v1"', f'entry_point = "{shape.fn}"', 'direction = "maximize"',
             f"time_limit_s = {limit:g}", "memory_mb = 2048", f"deterministic = {'false' if timed else 'true'}",
             f'returns = "what {shape.fn}() returns; score.py runs the original evaluate() over it"']
    for pname, value in shape.args.items():
        lines += ["", f"[params.{pname}]", f'type = "{_TYPES[type(value)]}"',
                  f"default = {_toml_value(value)}", f'help = "passed to {shape.fn}() by the original evaluator"']
    target.mkdir()
    files = {"task.toml": "\n".join(lines) + "\n", "description.md": description.strip() + "\n", "seed.py": seed,
             "score.py": score}
    for file, text in files.items():
        (target / file).write_text(text, encoding="utf-8")
    return target


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
