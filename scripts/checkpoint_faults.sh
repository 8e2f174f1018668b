#!/usr/bin/env bash
# Checkpoints under kill -9: TRIALS times (default 1000), a writer saving checkpoints step after
# step is killed at a random moment; the checkpoint at the path must load (CRC checked) and be the
# last completed save or the one in flight, and temporary files left behind must not break the next
# writer. Prints "checkpoint_faults: trials T, kills mid-write M (P%), failures F". Details and
# options: scripts/checkpoint_faults.py (--hidden, --max-delay, --seed, --dir).
# Uses build/python (or PYTHONPATH when set) and Debian's /usr/bin/python3 (or PYTHON).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="${PYTHONPATH:-$root/build/python}"
exec "${PYTHON:-/usr/bin/python3}" "$root/scripts/checkpoint_faults.py" "$@"
