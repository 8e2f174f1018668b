#!/usr/bin/env bash
# The README's test command: install dependencies, build, install, then run the whole suite
# (GoogleTest + conformance through ctest, then pytest). Ends with the runners' own summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
bash scripts/install.sh
status=0
# Every C++ test and the conformance runner again under AddressSanitizer + UBSan (build-asan/).
echo "[onnxtrain] sanitizer run (scripts/sanitize.sh)"
bash scripts/sanitize.sh || status=1
(cd build && ctest --output-on-failure -j "$(nproc)") || status=1
if [ -f build/conformance_report.md ]; then
  echo "[onnxtrain] conformance: $(sed -n 3p build/conformance_report.md) (table: build/conformance_report.md)"
fi
PYTHONPATH="$PWD/build/python" ONNXTRAIN_CLI="$PWD/build/onnxtrain" ONNXTRAIN_INSTALLED=1 \
  /usr/bin/python3 -m pytest -q tests/python || status=1
exit $status
