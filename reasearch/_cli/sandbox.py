"""``reasearch sandbox``: which isolation this machine offers (``check``) and one sandboxed call (``run``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reasearch.errors import ConfigError

EXIT_OK, EXIT_FAILED = 0, 1
_PROCESS_BANNER = ("WARNING: sandbox=process: NO filesystem or network isolation. Candidate code can read and "
                   "write what this user can and reach the network; only rlimits and process-group kills apply.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sandbox", help="check the sandbox, or run one function of a file in it",
                       description="Check which isolation is available here, or run one function in the sandbox.")
    ss = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND")
    ss.required = True

    c = ss.add_parser("check", help="report which isolation is available here, and how to fix what is missing",
                      description="Probe nsjail, the sandbox runtime and the network namespace; say which mode "
                      "'auto' selects here and, when something is missing, why and how to fix it. Exit status 0 "
                      "when nsjail isolation works, 1 when only process mode is available.")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.add_argument("--gpu", action="store_true",
                   help="also list the GPUs (and why one is not usable), the slot holders, and run a probe on one "
                        "leased slot in a jail (device visible, CUDA_VISIBLE_DEVICES, torch.cuda)")
    c.set_defaults(func=_check)

    k = ss.add_parser("clean", help="remove the sandbox's runtime folders that no live process uses",
                      description="Remove the interpreter mirrors and code copies in the per-user private runtime "
                                  "folder that no live process uses (a mirror holds up to ~1 GB); the next pool "
                                  "rebuilds what it needs.")
    k.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    k.set_defaults(func=_clean)

    r = ss.add_parser("run", help="run one function of a Python file in the sandbox and print the outcome",
                      description="Run FUNC from FILE in a fresh sandbox worker and print the outcome. Exit status "
                      "0 when the status is OK, 1 otherwise (TIMEOUT, OOM, CRASH).")
    r.add_argument("file", metavar="FILE", help="the Python source file of the candidate")
    r.add_argument("--entry", metavar="FUNC", action="append", required=True,
                   help="function to call (repeat to give fall-back names)")
    r.add_argument("--payload", metavar="JSON", default="{}", help="keyword arguments as a JSON object")
    r.add_argument("--timeout", metavar="S", type=float, default=10.0, help="wall-time limit in seconds (10)")
    r.add_argument("--memory", metavar="MB", type=int, default=1024,
                   help="address-space limit in MB on top of the warm runtime (1024)")
    r.add_argument("--mode", choices=("auto", "nsjail", "process"), default="auto", help="isolation mode (auto)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=_run)


def _clean(args: argparse.Namespace) -> int:
    from reasearch.engine import clean_runtime

    folders = clean_runtime(dry_run=args.dry_run)
    gone = [f for f in folders if not f.in_use]
    for f in folders:
        what = "in use, kept" if f.in_use else ("would remove" if args.dry_run else "removed")
        print(f"{what}: {f.path} ({f.bytes / 1e6:.1f} MB)", file=sys.stderr)
    verb = "would free" if args.dry_run else "freed"
    print(f"{len(gone)} of {len(folders)} runtime folders {'to remove' if args.dry_run else 'removed'}; {verb} "
          f"{sum(f.bytes for f in gone) / 1e6:.1f} MB", file=sys.stderr)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from reasearch.engine import detect_isolation

    report = detect_isolation()
    gpu_doc = _gpu_check(report.mode) if getattr(args, "gpu", False) else None
    if args.json:
        doc = report.to_dict()
        if gpu_doc is not None:
            doc["gpu"] = gpu_doc
        print(json.dumps(doc, indent=2))
        return EXIT_OK if report.nsjail_ok and (gpu_doc is None or gpu_doc["probe_ok"]) else EXIT_FAILED
    if gpu_doc is not None:
        _print_gpu(gpu_doc)
    console = Console()
    table = Table(title="sandbox check")
    for col in ("check", "ok", "detail"):
        table.add_column(col)
    for name, ok, detail in report.checks:
        table.add_row(name, "[green]yes[/]" if ok else "[red]NO[/]", detail)
    console.print(table)
    console.print(f"runtime: {report.runtime}")
    if report.nsjail_ok:
        console.print("[bold green]mode auto -> nsjail[/] (filesystem, network, PID and user isolation)")
        return EXIT_OK
    console.print(f"[bold red]mode auto -> process[/]: {_PROCESS_BANNER}")
    for problem in report.problems:
        console.print(f"[red]- {problem}[/]")
    return EXIT_FAILED


def _plain(obj: Any) -> Any:
    """A JSON-printable copy (arrays -> lists, bytes -> a short note, non-finite floats -> strings)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _plain(obj.tolist())
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def _run(args: argparse.Namespace) -> int:
    from reasearch.engine import SandboxConfig, SandboxPool
    from reasearch.engine.protocol import Limits, RunRequest

    source = Path(args.file).read_text()
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ConfigError("--payload must be a JSON object of keyword arguments")
    if not args.timeout > 0 or args.memory <= 0:
        raise ConfigError("--timeout and --memory must be positive")
    with SandboxPool(SandboxConfig(mode=args.mode, workers=1)) as pool:
        if pool.mode == "process":
            print(_PROCESS_BANNER, file=sys.stderr)
        out = pool.run(RunRequest(source=source, entry=tuple(args.entry), payload=payload,
                                  limits=Limits(wall_s=args.timeout, memory_mb=args.memory)))
    doc = {"status": out.status.value, "value": _plain(out.value), "wall_s": out.wall_s, "cpu_s": out.cpu_s,
           "exit_code": out.exit_code, "signal": out.signal, "error": out.error, "stdout": out.stdout,
           "stderr": out.stderr, "sandbox_mode": out.sandbox_mode}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        console = Console()
        colour = "green" if out.status.value == "OK" else "red"
        console.print(f"[bold {colour}]{out.status.value}[/]  wall {out.wall_s:.4f} s  cpu {out.cpu_s:.4f} s  "
                      f"sandbox={out.sandbox_mode}")
        if out.status.value == "OK":
            console.print("value:", json.dumps(doc["value"])[:4000], markup=False, highlight=False)
        if out.error:
            console.print(out.error, markup=False, highlight=False)
        if out.stdout:
            console.print("--- stdout ---\n" + out.stdout, markup=False, highlight=False)
        if out.stderr:
            console.print("--- stderr ---\n" + out.stderr, markup=False, highlight=False)
    return EXIT_OK if out.status.value == "OK" else EXIT_FAILED


_GPU_PROBE = (
    "import glob, json, os\n"
    "doc = {'visible_nodes': sorted(glob.glob('/dev/nvidia*')), 'cuda_visible_devices': "
    "os.environ.get('CUDA_VISIBLE_DEVICES'), 'omp_threads': os.environ.get('OMP_NUM_THREADS'), "
    "'cores': sorted(os.sched_getaffinity(0))}\n"
    "try:\n"
    "    import torch\n"
    "    doc['torch'] = torch.__version__\n"
    "    doc['torch_cuda'] = torch.version.cuda\n"
    "    doc['cuda_available'] = torch.cuda.is_available()\n"
    "    if doc['cuda_available']:\n"
    "        doc['device_count'] = torch.cuda.device_count()\n"
    "        doc['device_name'] = torch.cuda.get_device_name(0)\n"
    "        x = torch.randn(1024, 1024, device='cuda')\n"
    "        doc['matmul_ok'] = bool(torch.isfinite(x @ x).all().item())\n"
    "except Exception as exc:\n"
    "    doc['torch_error'] = f'{type(exc).__name__}: {exc}'\n"
    "print('GPU-PROBE ' + json.dumps(doc))\n"
)


def _gpu_check(mode: str) -> dict[str, Any]:
    """GPUs seen, why one is unusable, slot holders, and a probe in a jail on one leased slot."""
    import tempfile

    from reasearch.engine.gpu import gpu_report, lease_slot, slot_status
    from reasearch.engine.training import run_job

    rep = gpu_report()
    doc: dict[str, Any] = {
        "source": rep.source, "note": rep.note,
        "usable": [{"index": d.index, "uuid": d.uuid, "name": d.name, "memory_mb": d.memory_mb, "fake": d.fake}
                   for d in rep.usable],
        "unusable": [{"index": d.index, "uuid": d.uuid, "name": d.name, "reason": why} for d, why in rep.unusable],
        "slots": slot_status(), "probe_ok": False,
    }
    folder = Path(tempfile.mkdtemp(prefix="reasearch-gpu-check-", dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        with lease_slot("auto", wait_s=60) as lease:
            doc["leased"] = lease.describe()
            job = run_job(["python3", "-c", _GPU_PROBE], cwd=folder, lease=lease, time_budget_s=120, grace_s=5,
                          log_path=folder / "probe.log", binds_rw=[folder], memory_mb=None, mode=mode)
        line = next((ln for ln in job.log_tail.splitlines() if ln.startswith("GPU-PROBE ")), None)
        probe = json.loads(line[len("GPU-PROBE "):]) if line else {"error": job.log_tail[-1500:]}
        doc.update(probe=probe, probe_status=job.status.value, probe_s=round(job.wall_s, 2),
                   sandbox_mode=job.sandbox_mode)
        want_cuda = bool(lease.gpu and lease.device is not None and not lease.device.fake)
        doc["probe_ok"] = job.ok and (not want_cuda or bool(probe.get("cuda_available") and probe.get("matmul_ok")))
        if want_cuda:
            node = lease.device.node  # type: ignore[union-attr]
            others = [n for n in probe.get("visible_nodes", []) if n.rstrip("0123456789") == "/dev/nvidia"
                      and n != node]
            doc["only_leased_device_visible"] = node in probe.get("visible_nodes", []) and not others
            doc["probe_ok"] = doc["probe_ok"] and doc["only_leased_device_visible"]
            if "torch" in probe and probe.get("torch_cuda") is None:
                doc["why"] = (f"torch {probe['torch']} is a CPU-only build: install a CUDA build into the venv "
                              "(scripts/gpu_check.sh prints the pip command)")
            elif not probe.get("cuda_available") and "torch" in probe:
                doc["why"] = ("torch.cuda is not available in the jail: the driver's libraries (libcuda.so.1; "
                              "REASEARCH_CUDA_LIB_DIRS) or device nodes are missing there")
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return doc


def _print_gpu(doc: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"GPUs (from {doc['source']})")
    for col in ("gpu", "name", "memory", "usable"):
        table.add_column(col)
    for d in doc["usable"]:
        table.add_row(str(d["index"]), d["name"] + (" (fake)" if d["fake"] else ""), f"{d['memory_mb']} MiB",
                      "[green]yes[/]")
    for d in doc["unusable"]:
        table.add_row(str(d["index"]), d["name"], "", f"[red]NO[/]: {d['reason']}")
    console.print(table)
    if doc["note"]:
        console.print(doc["note"])
    for s in doc["slots"]:
        console.print(f"slot {s['slot']}: " + ("free" if s["free"] else f"leased by pid {s['holder_pid']}"))
    colour = "green" if doc["probe_ok"] else "red"
    console.print(f"[bold {colour}]probe on {doc.get('leased')}: {doc.get('probe_status')}[/] "
                  f"({doc.get('probe_s')} s, sandbox={doc.get('sandbox_mode')})")
    if doc.get("why"):
        console.print(f"[red]{doc['why']}[/]", highlight=False)
    console.print(json.dumps(doc.get("probe", {})), markup=False, highlight=False)
