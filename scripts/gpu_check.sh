#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU. Run it as is from the repository root, in the venv where
# reasearch is installed (`pip install -e '.[test]'`):   scripts/gpu_check.sh
#   0. the host: nvidia-smi (driver and the CUDA version it supports), the venv's torch (it must be a CUDA
#      build: a CPU-only torch is reported with the exact pip command that installs a CUDA one), and the
#      driver's user-space libraries the jail binds read-only (libcuda.so.1, libnvidia-ml.so.1, ...).
#   1. `reasearch sandbox check --gpu`: the GPUs the engine sees (no torch import), why one is unusable, and
#      a probe in a jail on one leased slot: only the leased /dev/nvidiaN visible, torch.cuda works there.
#   2. one nanogpt/v2 experiment of the seed repository on a GPU slot, recorded in a run store:
#      status OK, val_bpb, and the GPU-seconds debited in the ledger with the result.
# Exit status 0 when every check passed; each failure says what to do. One JSON summary line per step.
# Settings: BUDGET (training seconds, default 30), EVAL_TOKENS (default 65536), PYTHON (default python3),
# REASEARCH_CUDA_LIB_DIRS (folders holding libcuda.so.1 when neither ldconfig nor the usual folders know them).
# A dry run without a GPU (checks the plumbing only; proves nothing about a GPU):
#   REASEARCH_FAKE_GPUS=1 GPU_CHECK_ALLOW_FAKE=1 BUDGET=5 EVAL_TOKENS=2048 scripts/gpu_check.sh
set -euo pipefail
BUDGET="${BUDGET:-30}"
PY="${PYTHON:-python3}"
ALLOW_FAKE="${GPU_CHECK_ALLOW_FAKE:-0}"
WORK="$(mktemp -d /var/tmp/reasearch-gpu-check-XXXXXX)"
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT

echo "== 0. host: NVIDIA driver, torch build, driver libraries for the jail"
"$PY" - "$ALLOW_FAKE" <<'PYEOF'
import json, re, shutil, subprocess, sys
allow_fake = sys.argv[1] == "1"
problems = []
smi = shutil.which("nvidia-smi")
driver = cuda = None
if smi:
    cp = subprocess.run([smi], capture_output=True, text=True)
    m = re.search(r"Driver Version:\s*([\d.]+)", cp.stdout)
    c = re.search(r"CUDA Version:\s*([\d.]+)", cp.stdout)
    driver, cuda = (m.group(1) if m else None), (c.group(1) if c else None)
    if cp.returncode != 0:
        problems.append(f"nvidia-smi failed (exit {cp.returncode}): {(cp.stdout + cp.stderr).strip()[-300:]}")
else:
    problems.append("nvidia-smi is not on PATH: no NVIDIA driver is installed (or PATH misses it)")
try:
    import torch
    version, torch_cuda = torch.__version__, torch.version.cuda
except ImportError as exc:
    version = torch_cuda = None
    problems.append(f"torch cannot be imported in {sys.executable}: {exc}")
if version is not None and torch_cuda is None:
    base = version.split("+")[0]
    # torch's CUDA builds; the highest one the driver supports (a driver runs builds up to its CUDA version).
    builds = [("cu130", (13, 0)), ("cu128", (12, 8)), ("cu126", (12, 6))]
    have = tuple(int(x) for x in cuda.split(".")[:2]) if cuda else None
    pick = next((tag for tag, need in builds if have is None or have >= need), None)
    if pick is None:
        problems.append(f"torch {version} is a CPU-only build, and this driver supports CUDA {cuda} only, older than "
                        f"every CUDA build torch {base} offers (12.6+): update the NVIDIA driver first")
    else:
        problems.append(
            f"torch {version} in {sys.executable} is a CPU-only build: experiments cannot use the GPU.\n"
            f"    Install a CUDA build into this venv (driver CUDA {cuda or 'unknown'}):\n"
            f"    {sys.executable} -m pip install --force-reinstall --index-url https://download.pytorch.org/whl/{pick} "
            f"torch=={base}\n"
            f"    (if pip finds no such build, pick another cuXXX at https://download.pytorch.org/whl/torch/)")
from reasearch.engine.gpu import driver_libraries
libs = driver_libraries()
import glob, os
anywhere = [p for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu")
            for p in glob.glob(os.path.join(d, "libcuda.so.1"))] + [dst for _, dst in libs if dst.endswith("libcuda.so.1")]
if smi and not anywhere:
    problems.append("libcuda.so.1 was found neither by ldconfig nor in the usual folders: set "
                    "REASEARCH_CUDA_LIB_DIRS=/path/to/the/driver/libs (the folder holding libcuda.so.1)")
print(json.dumps({"nvidia_smi": smi, "driver": driver, "driver_cuda": cuda, "torch": version, "torch_cuda": torch_cuda,
                  "libcuda": anywhere, "bound_file_by_file": [dst for _, dst in libs]}))
for p in problems:
    print(("WARNING (dry run): " if allow_fake else "FAIL: ") + p, file=sys.stderr)
if problems and not allow_fake:
    sys.exit(1)
PYEOF

echo "== 1. sandbox check --gpu"
if ! command -v reasearch >/dev/null; then
    echo "FAIL: the reasearch command is not on PATH: activate the venv where it is installed (pip install -e .)" >&2
    exit 1
fi
reasearch sandbox check --gpu --json > "$WORK/check.json" || true
"$PY" - "$WORK/check.json" <<'PYEOF'
import json, os, sys
doc = json.load(open(sys.argv[1]))
gpu = doc.get("gpu", {})
print(json.dumps({"sandbox": doc.get("mode"), **{k: gpu.get(k) for k in (
    "source", "usable", "unusable", "leased", "probe_status", "probe", "only_leased_device_visible", "probe_ok")}},
    indent=1))
real = [d for d in gpu.get("usable", []) if not d.get("fake") or os.environ.get("GPU_CHECK_ALLOW_FAKE") == "1"]
if not real:
    sys.exit("FAIL: no usable (real) GPU: " + (gpu.get("note") or json.dumps(gpu.get("unusable"))))
if doc.get("mode") != "nsjail":
    print("WARNING: nsjail does not run here, so the experiment runs as a plain process (no jail): "
          + "; ".join(doc.get("problems", [])), file=sys.stderr)
if not gpu.get("probe_ok"):
    sys.exit("FAIL: the jailed probe did not see exactly the leased device with working CUDA (see 'probe' above)")
PYEOF

echo "== 2. one nanogpt/v2 experiment on a GPU slot (budget ${BUDGET} s), GPU-seconds in the ledger"
"$PY" - "$WORK" "$BUDGET" <<'PYEOF'
import json, os, sys, time
from reasearch.runs import Run, Unit, open_store
work, budget = sys.argv[1], float(sys.argv[2])
store = open_store(f"{work}/store")
run = Run.create(store, task_id="nanogpt/v2", budget={"experiments": 1},
                 task_params={"time_budget_s": budget, "grace_s": 60.0, "slot": "gpu",
                              "eval_tokens": int(os.environ.get("EVAL_TOKENS", "65536"))})
t0 = time.monotonic()
res = run.evaluate(run.task.seed_program(), step=0, note="gpu check", options={"experiment_dir": f"{work}/exp"})
used = run.used()
m = res.metrics
summary = {"status": res.status.value, "val_bpb": res.score, "slot": m.get("slot"), "train_s": m.get("train_s"),
           "eval_s": m.get("eval_s"), "gpu_s": m.get("gpu_s"), "last_step": m.get("last_step"),
           "median_step_ms": m.get("median_step_ms"), "ledger_gpu_seconds": used[Unit.GPU_SECONDS],
           "ledger_experiments": used[Unit.EXPERIMENTS], "sandbox": res.provenance.sandbox_mode,
           "wall_s": round(time.monotonic() - t0, 1)}
print(json.dumps(summary))
if res.status.value != "OK":
    print(res.feedback[-3000:])
    sys.exit("FAIL: the experiment did not end OK (its log tail is above)")
if not (used[Unit.GPU_SECONDS] > 0 and used[Unit.EXPERIMENTS] == 1 and str(m.get("slot", "")).startswith("gpu")):
    sys.exit("FAIL: the experiment did not run on a GPU slot with its GPU-seconds debited")
print("GPU CHECK PASSED")
PYEOF
