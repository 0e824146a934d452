"""``reasearch certify TASK_ID FILE``: a claimed result re-scored in exact arithmetic, as a certificate.

The candidate runs in the sandbox as ``eval`` runs it; the certificate logic is
:func:`reasearch.evaluators.certificate.certify` (this module only parses arguments and writes files).
Exit 0: the claim is ``strict``; 1: ``tolerant`` or ``invalid`` (the certificate is still written);
2: bad input (one line).
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

from reasearch._cli._params import key_values
from reasearch._cli._shared import read_source
from reasearch.errors import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "certify",
        help="re-score a claimed result in exact arithmetic and write a certificate",
        description="Run a candidate in the sandbox (as `eval` does), convert its answer exactly to rationals and "
        "check every constraint without rounding (circle_packing/n{N}-v1: walls and every pair; heilbronn/n{N}-v1: "
        "the square and every triangle). The certificate says whether the claim is strict (every constraint holds "
        "exactly), tolerant (it holds only within --tolerance) or invalid, with the exact score as p/q. "
        "Exit 0 if strict, 1 if tolerant or invalid, 2 on bad input.",
    )
    c.add_argument("task_id", metavar="TASK_ID", help="e.g. circle_packing/n26-v1 or heilbronn/n13-v1")
    c.add_argument("file", metavar="FILE", help="the candidate's Python source file")
    c.add_argument("-o", "--output", metavar="PATH", help="write the certificate (JSON) to this file")
    c.add_argument("--seed", type=int, default=0, help="seed handed to the task and the candidate (default 0)")
    c.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="task constructor parameter (repeatable)")
    c.add_argument("--tolerance", default="1e-6", metavar="X",
                   help="largest exact violation of a 'tolerant' claim, read exactly as a decimal (default 1e-6)")
    c.add_argument("--json", action="store_true", help="print the certificate as JSON instead of a summary")
    c.add_argument("--force", action="store_true", help="overwrite an existing -o file")
    c.set_defaults(func=run_certify)


def _tolerance(text: str) -> Fraction:
    try:
        value = Fraction(text.strip())  # "1e-6" is exactly 1/1000000
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"--tolerance must be a number such as 1e-6, got {text!r}") from None
    if not 0 <= value <= 1:  # a violation in the unit square is at most a few units; 1 already accepts anything
        raise ConfigError(f"--tolerance must be between 0 and 1, got {text!r}")
    return value


def run_certify(args: argparse.Namespace) -> int:
    from reasearch.evaluators.certificate import certify, supports_certification
    from reasearch.evaluators.registry import make

    tolerance = _tolerance(args.tolerance)
    task = make(args.task_id, **key_values(args.param))  # UnknownTaskError / ConfigError -> exit 2
    if not supports_certification(task):
        raise ConfigError(f"{task.spec.id} has no exact certification; tasks that have one: "
                          "circle_packing/n{N}-v1, heilbronn/n{N}-v1")
    out = Path(args.output) if args.output else None
    if out is not None and out.exists() and not args.force:
        raise ConfigError(f"{out} exists; pass --force to overwrite it")
    if out is not None and not out.parent.is_dir():
        raise ConfigError(f"no such folder for the certificate: {out.parent}")
    source = read_source(args.file, task)
    cert = certify(task, source, seed=args.seed, tolerance=tolerance)
    if out is not None:
        out.write_text(cert.to_json() + "\n", encoding="utf-8")
    print(cert.to_json() if args.json else cert.summary())
    if out is not None and not args.json:
        print(f"wrote the certificate to {out}")
    return EXIT_OK if cert.kind == "strict" else EXIT_FAILED
