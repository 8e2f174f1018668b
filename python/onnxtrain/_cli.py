"""The `onnxtrain` command of a pip-installed onnxtrain: runs the command-line program the wheel
carries (onnxtrain/bin/onnxtrain) with the same arguments."""
import os
import sys


def main():
    """Replaces this process with the bundled command-line program."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "onnxtrain")
    if not os.access(exe, os.X_OK):
        sys.exit(f"onnxtrain: the command-line program {exe} is missing from this installation "
                 "(install onnxtrain's wheel, or build it with CMake: README.md)")
    os.execv(exe, ["onnxtrain", *sys.argv[1:]])


if __name__ == "__main__":
    main()
