#!/usr/bin/env bash
# Run HERE, on a machine with PyPI, before a GPU session: downloads into .whl/ (ignored by git,
# carried by the device tool) the wheels that the GPU machine's Python lacks for
# ops/bench/gpu_check.sh. That machine's image has torch, torchvision, numpy, Pillow,
# scikit-image, psutil, packaging and typing-extensions, and no network; inferstream's import
# path also needs the four below (the data path itself uses none of them: the worker's modules
# import the Avro records and the Kafka clients' types). Versions are this checkout's .venv's.
#
#   ops/bench/gpu_wheels.sh                 # cp312 manylinux wheels into .whl/ (about 10 MB)
#   PYVER=3.11 OUTDIR=/tmp/w ops/bench/gpu_wheels.sh   # others, to rehearse gpu_check.sh here
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER=${PYVER:-3.12}
OUTDIR=${OUTDIR:-.whl}
PY=${PY:-.venv/bin/python}
pins=()
for name in fastavro aiokafka async-timeout confluent-kafka; do
  version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
  pins+=("$name${version:+==$version}")
done
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${platforms[@]}" -d "$OUTDIR" "${pins[@]}"
ls -1 "$OUTDIR"
du -sh "$OUTDIR"
