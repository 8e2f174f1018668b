#!/usr/bin/env bash
# The README's test command: install dependencies, build everything with the tests (compiler
# warnings as errors), install, then run the whole suite: GoogleTest + conformance through ctest,
# then pytest. Ends with the runners' own summaries (also kept in build/test_summary.txt).
# The sanitizer run is its own script (scripts/sanitize.sh), which CI runs after this one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --tests
ONNXTRAIN_WERROR=ON bash scripts/build.sh
bash scripts/install.sh
status=0
summary=build/test_summary.txt
: > "$summary"
(cd build && ctest --output-on-failure -j "$(nproc)") 2>&1 | tee build/ctest.log || status=1
grep -E "tests passed|tests failed|Total Test time" build/ctest.log >> "$summary" || true
if [ -f build/conformance_report.md ]; then
  echo "[onnxtrain] conformance: $(sed -n 3p build/conformance_report.md) (table: build/conformance_report.md)" | tee -a "$summary"
fi
PYTHONPATH="$PWD/build/python" ONNXTRAIN_CLI="$PWD/build/onnxtrain" ONNXTRAIN_INSTALLED=1 \
  /usr/bin/python3 -m pytest -q tests/python 2>&1 | tee build/pytest.log || status=1
tail -n 1 build/pytest.log >> "$summary"
exit $status
