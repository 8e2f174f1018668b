"""onnxtrain's wheel. CMake builds the extension module (onnxtrain._C) and the command line, which
the wheel carries as onnxtrain/bin/onnxtrain behind the `onnxtrain` console entry point.

    python3 -m build --no-isolation --wheel        # dist/onnxtrain-<version>-cp311-cp311-linux_x86_64.whl

The CMake build folder is build-wheel/cmake (library, CLI and module only), or ONNXTRAIN_BUILD_DIR
to reuse an existing one (the test command's build/). See docs/packaging.md.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build-wheel"), exist_ok=True)  # setup.cfg's egg_base


def project_version():
    """The version of CMakeLists.txt's project() call: one number for the library, the .deb and the wheel."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(onnxtrain VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: project(onnxtrain VERSION x.y.z) not found")
    return m.group(1)


class CMakeBuild(build_ext):
    """Builds onnxtrain._C and the CLI with CMake and copies them into the wheel's tree."""

    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("ONNXTRAIN_BUILD_DIR") or os.path.join(ROOT, "build-wheel", "cmake"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DONNXTRAIN_BUILD_TESTS=OFF", "-DONNXTRAIN_BUILD_BENCH=OFF",
                                   f"-DPYTHON_EXECUTABLE={sys.executable}", f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 1),
                               "--target", "_C", "onnxtrain_cli", "python_files"])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        module = os.path.join(build_dir, "python", "onnxtrain", "_C" + suffix)
        if not os.path.exists(module):
            built = glob.glob(os.path.join(build_dir, "python", "onnxtrain", "_C*.so"))
            raise RuntimeError(f"{module} was not built (found {built}): the CMake build folder was configured for "
                               f"another Python than {sys.executable}; use a fresh ONNXTRAIN_BUILD_DIR")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(module, target)
        bindir = os.path.join(os.path.dirname(target), "bin")
        os.makedirs(bindir, exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "onnxtrain"), os.path.join(bindir, "onnxtrain"))
        os.chmod(os.path.join(bindir, "onnxtrain"), 0o755)


setup(
    name="onnxtrain",
    version=project_version(),
    description="Runs and trains ONNX models on CPU, with onnxruntime's and onnxruntime-training's APIs",
    long_description=open(os.path.join(ROOT, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    install_requires=["numpy"],
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[Extension("onnxtrain._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["onnxtrain = onnxtrain._cli:main"]},
    zip_safe=False,
)
