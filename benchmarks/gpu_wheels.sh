#!/usr/bin/env bash
# Download, here, the wheels of the Python packages that creditflow imports and the lent GPU machine's image
# lacks (its package list: /work/.library/device/KINDS.md), for its Python 3.12 on x86-64, into .whl/ (ignored
# by git; carried to the machine with `carry: [".whl"]`). benchmarks/gpu_batch.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# versions as in constraints.txt; pure-Python ones and the two compiled ones (pydantic-core, rapidfuzz)
PINNED=$(grep -iE '^(pydantic|pydantic_core|annotated-types|typing-inspection|trl|datasets|dill|multiprocess|bm25s|rapidfuzz)==' constraints.txt)
for req in $PINNED; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
    -d .whl "$req"
done
ls -la .whl
