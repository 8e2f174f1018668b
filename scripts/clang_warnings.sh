#!/usr/bin/env bash
# Compiles every C and C++ file of the project's own targets with Debian's clang at -Wall -Wextra
# (syntax and semantic checks only: clang's warnings come from its front end) and prints each
# warning; exits 1 when there is any. GCC's warnings are errors in the test command's build.
#   scripts/clang_warnings.sh        (clang: scripts/install_deps.sh --tests --fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-clang}
bash scripts/install_deps.sh --tests --fuzz >/dev/null
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DONNXTRAIN_PCH=OFF -DONNXTRAIN_UNITY=OFF -DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER= >/dev/null
cmake --build "$BUILD_DIR" --target onnxtrain_generated >/dev/null  # the generated header the sources include
/usr/bin/python3 - "$BUILD_DIR" "${JOBS:-$(nproc)}" <<'PY'
import json, os, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
build, jobs = sys.argv[1], int(sys.argv[2])
root = os.getcwd()
commands = [c for c in json.load(open(os.path.join(build, "compile_commands.json"))) if c["file"].startswith(root)]
def check(c):
    args = shlex.split(c["command"])
    out = args.index("-o")
    args = args[:out] + args[out + 2:] + ["-fsyntax-only"]
    r = subprocess.run(args, cwd=c["directory"], capture_output=True, text=True)
    return c["file"], r.returncode, r.stderr
warnings = 0
with ThreadPoolExecutor(jobs) as pool:
    for f, rc, err in pool.map(check, commands):
        if rc or "warning:" in err:
            sys.stdout.write(err)
        warnings += err.count("warning:") + (1 if rc else 0)
print(f"[clang] {len(commands)} files, {warnings} warnings")
sys.exit(1 if warnings else 0)
PY
