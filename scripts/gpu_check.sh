#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU (run as is from the repository root, after `pip install -e .`
# and a CUDA build of torch):
#   1. `reasearch sandbox check --gpu`: the GPUs the engine sees (no torch import), why one is unusable, and
#      a probe in a jail on one leased slot: only the leased /dev/nvidiaN visible, torch.cuda works there.
#   2. one nanogpt/v1 experiment of the seed repository on a GPU slot, recorded in a run store:
#      status OK, val_bpb, and the GPU-seconds debited in the ledger with the result.
# Exit status 0 when every check passed. Prints one JSON summary line at the end.
# A dry run without a GPU: REASEARCH_FAKE_GPUS=1 GPU_CHECK_ALLOW_FAKE=1 BUDGET=5 EVAL_TOKENS=2048 scripts/gpu_check.sh
set -euo pipefail
BUDGET="${BUDGET:-30}"
WORK="$(mktemp -d /var/tmp/reasearch-gpu-check-XXXXXX)"
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
PY="${PYTHON:-python3}"

echo "== 1. sandbox check --gpu"
reasearch sandbox check --gpu --json > "$WORK/check.json" || true
"$PY" - "$WORK/check.json" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
gpu = doc.get("gpu", {})
print(json.dumps({k: gpu.get(k) for k in ("source", "usable", "unusable", "leased", "probe_status", "probe",
                                          "only_leased_device_visible", "probe_ok")}, indent=1))
import os
real = [d for d in gpu.get("usable", []) if not d.get("fake") or os.environ.get("GPU_CHECK_ALLOW_FAKE") == "1"]
if not real:
    sys.exit("FAIL: no usable (real) GPU: " + (gpu.get("note") or json.dumps(gpu.get("unusable"))))
if not gpu.get("probe_ok"):
    sys.exit("FAIL: the jailed probe did not see exactly the leased device with working CUDA")
PYEOF

echo "== 2. one nanogpt/v1 experiment on a GPU slot (budget ${BUDGET} s), GPU-seconds in the ledger"
"$PY" - "$WORK" "$BUDGET" <<'PYEOF'
import json, sys, time
from reasearch.runs import Run, Unit, open_store
work, budget = sys.argv[1], float(sys.argv[2])
store = open_store(f"{work}/store")
run = Run.create(store, task_id="nanogpt/v1", budget={"experiments": 1},
                 task_params={"time_budget_s": budget, "grace_s": 60.0, "slot": "gpu",
                              "eval_tokens": int(__import__("os").environ.get("EVAL_TOKENS", "65536"))})
t0 = time.monotonic()
res = run.evaluate(run.task.seed_program(), step=0, note="gpu check")
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
    sys.exit("FAIL: the experiment did not end OK")
if not (used[Unit.GPU_SECONDS] > 0 and used[Unit.EXPERIMENTS] == 1 and str(m.get("slot", "")).startswith("gpu")):
    sys.exit("FAIL: the experiment did not run on a GPU slot with its GPU-seconds debited")
print("GPU CHECK PASSED")
PYEOF
