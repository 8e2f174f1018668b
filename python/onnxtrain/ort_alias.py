"""Opt-in alias that makes ``import onnxruntime`` load onnxtrain.

Run an unchanged onnxruntime / onnxruntime-training script on onnxtrain::

    python3 -m onnxtrain.ort_alias [--force] script.py [args...]
    python3 -m onnxtrain.ort_alias [--force] -m some.module [args...]

The script runs as ``__main__`` the way ``python3 script.py`` runs it (``sys.argv``, ``sys.path[0]``
= the script's directory, exit status, tracebacks), and ``python3 -m`` likewise for ``-m``. From code,
``onnxtrain.ort_alias.install()`` activates the alias for the rest of the process and
``uninstall()`` removes it again.

With the alias active, ``onnxruntime`` stands for ``onnxtrain`` and ``onnxruntime.X.Y`` for
``onnxtrain.X.Y``, by prefix (``_RENAMES`` lists the few names that differ), so that
``onnxruntime.InferenceSession is onnxtrain.InferenceSession`` and
``except onnxruntime.capi.onnxruntime_pybind11_state.Fail`` catches onnxtrain's ``Fail``. What
onnxtrain lacks fails loudly and by its onnxruntime name, never with a stand-in: a module raises
``ModuleNotFoundError`` (``import onnxruntime.quantization``), a name ``AttributeError``
(``onnxruntime.ModelCompiler``) or ``ImportError`` (``from onnxruntime import ModelCompiler``), each
saying that onnxtrain does not provide it.

The alias never hides a real onnxruntime unless told to: if one is importable (on ``sys.path`` or
already imported), ``install()`` raises ``RealOnnxruntimeError`` saying where it is;
``install(force=True)`` / ``--force`` replaces it for this process (dropping its imported modules
from ``sys.modules``). Activation is announced once per process on stderr.

Mechanism: a meta-path finder (first on ``sys.meta_path``) answers every ``onnxruntime`` /
``onnxruntime.*`` module name with a thin *alias module*: a ``types.ModuleType`` subclass named
by the onnxruntime name, whose ``__getattr__`` hands out the attributes of the real onnxtrain
module (kept in ``__onnxtrain__``). The attributes are the real objects, so identity and
``except`` clauses hold; an alias module of its own (rather than the onnxtrain module itself
under two names) is what lets a missing name be reported by its onnxruntime name. So:

* ``__name__``, ``__spec__`` and ``sys.modules`` keys are the onnxruntime names; ``__file__``,
  ``__path__`` and ``__doc__`` are the onnxtrain module's; ``onnxruntime.__version__`` (and ``onnxruntime.version``) is the
  onnxruntime API level onnxtrain provides (``onnxtrain.__onnxruntime_version__``); ``__all__`` and every
  other attribute are read through from the onnxtrain module at each access (``__all__`` is the
  module's public names where it defines none, so ``import *`` takes what it would take);
  ``dir()`` lists both.
* A submodule reached as an attribute (``onnxruntime.capi._pybind_state``) is its alias module,
  imported on first use as a package's ``__init__`` importing it would.
* Assigning or deleting an attribute (``unittest.mock.patch("onnxruntime.training.x.y", ...)``)
  sets or deletes it on the onnxtrain module, so that onnxtrain's own code, which reads the name
  from its module, sees the patch as onnxruntime's code would see it on onnxruntime (and
  ``mock.patch`` restores it there on exit). Module bookkeeping (dunder names, the submodules the
  import system binds on their parent) stays on the alias module.
* ``importlib.util.find_spec("onnxruntime.quantization")`` returns ``None`` as for any absent
  module (the finder looks at its caller to tell a probe from an import).
* The alias holds in this process only: child processes (``multiprocessing`` with ``spawn``,
  ``subprocess``) start without it.
"""
import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import threading
import types
import zipfile

_ALIAS = "onnxruntime"
_TARGET = "onnxtrain"

# onnxruntime module names whose onnxtrain module is named otherwise (the longest prefix wins);
# every other ``onnxruntime.X`` is ``onnxtrain.X``.
_RENAMES = {}

_IMPORTLIB_DIR = os.path.dirname(importlib.__file__) + os.sep
_IMPORTLIB_UTIL = importlib.util.__file__

_lock = threading.RLock()
_announced = False

USAGE = "usage: python3 -m onnxtrain.ort_alias [--force] (script.py | -m module) [args...]"


class RealOnnxruntimeError(RuntimeError):
    """A real onnxruntime is importable, so the alias will not replace it without ``force``."""


def _to_target(name):
    """The onnxtrain module name that the onnxruntime module name ``name`` stands for."""
    for alias in sorted(_RENAMES, key=len, reverse=True):
        if name == alias or name.startswith(alias + "."):
            return _RENAMES[alias] + name[len(alias):]
    return _TARGET + name[len(_ALIAS):]


def _to_alias(target):
    """The onnxruntime module name under which the onnxtrain module ``target`` appears."""
    for alias, renamed in sorted(_RENAMES.items(), key=lambda item: len(item[1]), reverse=True):
        if target == renamed or target.startswith(renamed + "."):
            return alias + target[len(renamed):]
    if target == _TARGET or target.startswith(_TARGET + "."):
        return _ALIAS + target[len(_TARGET):]
    return None


def _caller_kind():
    """Who asked the finder: ``"probe"`` (``importlib.util.find_spec``), ``"fromlist"`` (the
    ``from package import name`` step that tries ``name`` as a submodule) or ``"import"``."""
    frame = sys._getframe(2)  # 0: here, 1: _AliasFinder.find_spec, 2: its caller
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        in_util = filename == "<frozen importlib.util>" or filename == _IMPORTLIB_UTIL
        if code.co_name == "_handle_fromlist" and filename.startswith("<frozen importlib._bootstrap"):
            return "fromlist"
        if code.co_name == "find_spec" and in_util:
            return "probe"
        if not (in_util or filename.startswith("<frozen importlib") or filename.startswith(_IMPORTLIB_DIR)):
            return "import"  # left the import machinery: whoever is here imports
        frame = frame.f_back
    return "import"


def _alias_submodule(module, real, name):
    """The alias module of ``module``'s submodule ``name`` when onnxtrain has what it maps to, else None."""
    if not hasattr(real, "__path__") or not name.isidentifier():
        return None
    fullname = f"{module.__name__}.{name}"
    try:
        spec = importlib.util.find_spec(_to_target(fullname))
    except (ImportError, ValueError):
        return None
    return None if spec is None else importlib.import_module(fullname)


class _AliasModule(types.ModuleType):
    """An ``onnxruntime*`` module: reads its attributes through from the onnxtrain module."""

    def __getattr__(self, name):
        real = self.__dict__.get("__onnxtrain__")
        if real is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}", name=name, obj=self)
        if name in ("__version__", "version") and hasattr(real, "__onnxruntime_version__"):
            # The onnxruntime API level onnxtrain provides, so that scripts' version checks pass
            # (onnxruntime.version, onnxruntime_validation's, is always its __version__).
            return real.__onnxruntime_version__
        try:
            value = getattr(real, name)
        except AttributeError:
            if name == "__all__":
                return [key for key in vars(real) if not key.startswith("_")]
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}", name=name,
                                     obj=self) from None
            submodule = _alias_submodule(self, real, name)
            if submodule is not None:
                return submodule
            raise AttributeError(
                f"module {self.__name__!r} has no attribute {name!r}: onnxtrain does not provide "
                f"{self.__name__}.{name} (no {real.__name__}.{name})", name=name, obj=self) from None
        if isinstance(value, types.ModuleType) and _to_alias(value.__name__) == f"{self.__name__}.{name}":
            return importlib.import_module(f"{self.__name__}.{name}")
        return value

    def _local(self, name, value=None):
        """Whether attribute ``name`` (being set to ``value``) belongs to the alias module itself
        rather than to the onnxtrain module behind it."""
        return (self.__dict__.get("__onnxtrain__") is None or (name.startswith("__") and name.endswith("__"))
                or isinstance(value, _AliasModule))

    def __setattr__(self, name, value):
        if self._local(name, value):
            super().__setattr__(name, value)
            return
        self.__dict__.pop(name, None)  # a local copy would hide the onnxtrain module's value
        setattr(self.__dict__["__onnxtrain__"], name, value)

    def __delattr__(self, name):
        if self._local(name) or name in self.__dict__:
            super().__delattr__(name)
            return
        delattr(self.__dict__["__onnxtrain__"], name)

    def __dir__(self):
        real = self.__dict__.get("__onnxtrain__")
        return sorted(set(self.__dict__) | (set(dir(real)) if real is not None else set()))

    def __repr__(self):
        real = self.__dict__.get("__onnxtrain__")
        where = getattr(real, "__file__", None) or getattr(real, "__name__", "?")
        return f"<module {self.__name__!r} (onnxtrain alias from {where!r})>"


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads every ``onnxruntime`` / ``onnxruntime.*`` module as an alias module."""

    _onnxtrain_ort_alias = True

    def find_spec(self, fullname, path=None, target=None):
        """A spec for the alias module of ``fullname``. Where onnxtrain lacks the module, raises an
        error naming it, except to ``importlib.util.find_spec``, which gets None."""
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        real_name = _to_target(fullname)
        try:
            real_spec = importlib.util.find_spec(real_name)
        except ModuleNotFoundError:
            real_spec = None  # a parent of real_name is missing
        if real_spec is None:
            kind = _caller_kind()
            if kind == "probe":
                return None
            if kind == "fromlist":
                parent, _, child = fullname.rpartition(".")
                raise ImportError(
                    f"cannot import name {child!r} from {parent!r}: onnxtrain does not provide "
                    f"{fullname} (neither a name {child!r} in {_to_target(parent)} nor a module "
                    f"{real_name})", name=parent)
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: onnxtrain does not provide it (no module {real_name}; "
                f"the onnxruntime alias maps {_ALIAS}.* to {_TARGET}.*)", name=fullname)
        spec = importlib.machinery.ModuleSpec(
            fullname, self, origin=real_spec.origin, loader_state=real_name,
            is_package=real_spec.submodule_search_locations is not None)
        spec.has_location = real_spec.has_location
        if spec.submodule_search_locations is not None:
            spec.submodule_search_locations = list(real_spec.submodule_search_locations)
        return spec

    def create_module(self, spec):
        """A new, empty alias module named ``spec.name``."""
        return _AliasModule(spec.name)

    def exec_module(self, module):
        """Imports the onnxtrain module and binds the alias module to it."""
        real = importlib.import_module(module.__spec__.loader_state)
        module.__dict__["__onnxtrain__"] = real
        module.__dict__["__doc__"] = real.__doc__


def _our_finders():
    """The alias finders on ``sys.meta_path`` (this module's, or a reloaded copy's)."""
    return [f for f in sys.meta_path if getattr(f, "_onnxtrain_ort_alias", False)]


def _real_onnxruntime():
    """Where a real (not aliased) onnxruntime is, or None when there is none."""
    module = sys.modules.get(_ALIAS)
    if module is not None and not isinstance(module, _AliasModule):
        return getattr(module, "__file__", None) or repr(module)
    if module is not None or _our_finders():
        return None
    try:
        spec = importlib.util.find_spec(_ALIAS)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace"):
        return None  # absent, or only a namespace directory called onnxruntime
    return spec.origin


def installed():
    """True while the alias is active in this process."""
    return bool(_our_finders())


def install(force=False):
    """Activate the alias for this process: ``import onnxruntime`` then loads onnxtrain.

    Does nothing if it is already active. If a real onnxruntime is importable or imported, raises
    ``RealOnnxruntimeError`` unless ``force`` is true, in which case the alias replaces it and its
    already-imported ``onnxruntime*`` modules are dropped from ``sys.modules``. Announces the alias
    on stderr the first time it becomes active in the process.
    """
    global _announced
    with _lock:
        if installed():
            return
        real = _real_onnxruntime()
        if real is not None and not force:
            raise RealOnnxruntimeError(
                f"a real onnxruntime is importable ({real}); the onnxtrain alias will not shadow it. "
                f"install(force=True) (or python3 -m onnxtrain.ort_alias --force) replaces it for "
                f"this process.")
        _purge()
        sys.meta_path.insert(0, _AliasFinder())
        if not _announced:
            _announced = True
            import onnxtrain
            replaced = f"; replacing the onnxruntime at {real}" if real is not None else ""
            print(f"onnxtrain: 'import onnxruntime' now loads onnxtrain {onnxtrain.__version__} "
                  f"(onnxruntime alias active{replaced})", file=sys.stderr, flush=True)


def uninstall():
    """Deactivate the alias and drop its ``onnxruntime*`` modules from ``sys.modules``.

    A real onnxruntime replaced with ``force`` is not brought back (import it again to get it).
    Returns whether the alias was active.
    """
    with _lock:
        finders = _our_finders()
        for finder in finders:
            sys.meta_path.remove(finder)
        _purge()
        return bool(finders)


def _purge():
    """Remove ``onnxruntime`` and ``onnxruntime.*`` from ``sys.modules``."""
    for name in [n for n in sys.modules if n == _ALIAS or n.startswith(_ALIAS + ".")]:
        del sys.modules[name]


def _print_exception_as_python(exc):
    """Report an uncaught exception without this runner's frames, as the interpreter would."""
    def ours(tb):
        filename = tb.tb_frame.f_code.co_filename
        return filename in (__file__, runpy.__file__) or filename.startswith("<frozen runpy")

    tb = exc.__traceback__
    while tb is not None and ours(tb):
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _run_script(script):
    """Run the file ``script`` as ``__main__`` the way ``python3 script`` does; returns an exit status
    when it cannot be opened."""
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    if os.path.isdir(path) or zipfile.is_zipfile(path):  # runs the __main__.py inside, as python does
        runpy.run_path(script, run_name="__main__")
        return None
    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as exc:
        print(f"{sys.executable or 'python3'}: can't open file {path!r}: [Errno {exc.errno}] "
              f"{exc.strerror}", file=sys.stderr)
        return 2
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                                __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    sys.modules["__main__"] = main_module
    exec(compile(source, path, "exec", dont_inherit=True), main_module.__dict__)
    return None


def main(argv=None):
    """Command line: ``[--force] script.py [args...]`` or ``[--force] -m module [args...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    force = False
    module = None
    while args:
        arg = args[0]
        if arg == "--force":
            force = True
            args.pop(0)
        elif arg in ("-h", "--help"):
            print(USAGE)
            return 0
        elif arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            args.pop(0)
            module = arg[2:] if len(arg) > 2 else (args.pop(0) if args else "")
            break
        elif arg == "--":
            args.pop(0)
            break
        elif arg.startswith("-"):
            print(f"onnxtrain.ort_alias: unknown option {arg!r}\n{USAGE}", file=sys.stderr)
            return 2
        else:
            break
    if module == "" or (module is None and not args):
        print(USAGE, file=sys.stderr)
        return 2

    if module is None:
        script = args[0]
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    else:
        sys.argv = [module] + args  # run_module puts the module's file in argv[0]
    try:
        install(force=force)
    except RealOnnxruntimeError as exc:
        print(f"onnxtrain.ort_alias: {exc}", file=sys.stderr)
        return 1

    try:
        if module is None:
            status = _run_script(script)
            if status is not None:
                return status
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: B902 (reported like an uncaught exception)
        _print_exception_as_python(exc)
        if isinstance(exc, KeyboardInterrupt):
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return 1
    return 0


if __name__ == "__main__":
    # Run the copy in sys.modules, so that the script's own ``import onnxtrain.ort_alias`` sees the
    # same state (one finder, one notice).
    from onnxtrain import ort_alias as _this
    sys.exit(_this.main())
