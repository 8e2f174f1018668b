"""onnxtrain's log: messages of the Python layer printed on stderr at or above a severity
(0 verbose, 1 info, 2 warning, 3 error, 4 fatal). ``set_default_logger_severity`` sets the
process-wide threshold; a session's ``SessionOptions.log_severity_level`` (when set, >= 0)
replaces it for that session's messages."""
import sys

_SEVERITY_NAMES = "VIWEF"
_default_severity = 2
_default_verbosity = 0


def _check(level, what):
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 4:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"{what} must be an integer from 0 (verbose) to 4 (fatal), got {level!r}")


def set_default_logger_severity(level):
    """Sets the default severity threshold: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal."""
    global _default_severity
    _check(level, "severity")
    _default_severity = level


def set_default_logger_verbosity(level):
    """Sets the detail of verbose messages (0: the default)."""
    global _default_verbosity
    if not isinstance(level, int) or level < 0:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"verbosity must be a non-negative integer, got {level!r}")
    _default_verbosity = level


def enabled(severity, session_severity=-1):
    """Whether a message of ``severity`` would print (lets hot paths skip formatting it)."""
    return severity >= (_default_severity if session_severity is None or session_severity < 0 else session_severity)


def log(severity, logid, message, session_severity=-1):
    """Prints ``message`` on stderr when ``severity`` reaches the threshold: the session's
    ``log_severity_level`` when set (>= 0), else the default."""
    if enabled(severity, session_severity):
        prefix = f"onnxtrain [{_SEVERITY_NAMES[severity]}]" + (f" {logid}" if logid else "")
        print(f"{prefix}: {message}", file=sys.stderr)
