#!/usr/bin/env bash
# Run THERE, on the GPU machine (no Kafka, no Java, no network), as the device tool's one
# prepared command; see DEVELOPERS.md ("The GPU check"). Benchmark P1's data path without Kafka
# (ops/bench/p1_data_path.py): the worker's decode -> batch -> model path with its defaults
# against the plain and the tuned PyTorch loop, on cuda, one table row per model as it finishes.
#
# Writes to $OUT (what the device tool brings back): env.txt (GPU, driver, torch), p1.md (the
# table and its command), run.log (its stderr), worker-<model>.log (the worker side's log:
# threads, precision, compile times, where JPEGs are decoded). The benchmark is stopped after
# BUDGET_S seconds, so that the rows finished by then come back inside one run's limit.
#
#   ops/bench/gpu_check.sh                                   # there, with .whl carried
#   DEVICE=cpu IMAGES=64 MODELS=alexnet OUT=/tmp/g ops/bench/gpu_check.sh   # a rehearsal here
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/inferstream-gpu-check}
DEVICE=${DEVICE:-cuda}
IMAGES=${IMAGES:-2048}
REPEATS=${REPEATS:-2}
MODELS=${MODELS:-alexnet googlenet efficientnet_lite0}
BUDGET_S=${BUDGET_S:-420}
PY=${PY:-python3}
WORKDIR=${WORKDIR:-/tmp/inferstream-p1-data-path}
mkdir -p "$OUT"

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/inferstream-site .whl/*.whl || { echo "installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/inferstream-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

{
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  nproc
  "$PY" - <<'PY'
import sys, torch, torchvision
print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision",
      torchvision.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda device")
import inferstream.serving.pipeline  # the import path: fails here if a wheel is missing
PY
} 2>&1 | tee "$OUT/env.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "the environment check failed: $OUT/env.txt" >&2; exit 1; }

# shellcheck disable=SC2086  # MODELS is a list
timeout --kill-after=10 "$BUDGET_S" "$PY" ops/bench/p1_data_path.py --device "$DEVICE" \
  --models $MODELS --images "$IMAGES" --repeats "$REPEATS" --workdir "$WORKDIR" \
  --worker-log-dir "$OUT" 2> "$OUT/run.log" | tee "$OUT/p1.md"
status=${PIPESTATUS[0]}
[ "$status" -eq 124 ] && echo "stopped after BUDGET_S=$BUDGET_S s; the rows above are complete"
tail -5 "$OUT/run.log"
exit "$status"
