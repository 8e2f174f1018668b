"""onnxruntime's ``onnxruntime.capi.onnxruntime_validation``: what the package is built for."""
from .. import __onnxruntime_version__, __version__  # noqa: F401 (the alias reads the first)

package_name = "onnxtrain"
version = __version__
cuda_version = ""  # no CUDA provider in this build


def check_distro_info():
    """onnxruntime warns on untested platforms; onnxtrain builds from source where it runs, so there
    is nothing to check."""


def validate_build_package_info():
    """Returns ``(has_ortmodule, package_name, version, cuda_version)`` as onnxruntime does;
    onnxtrain has no ORTModule."""
    return False, package_name, version, cuda_version
