"""The error hierarchy: what users already catch keeps working."""

from __future__ import annotations

import concurrent.futures
import multiprocessing

import fiber
from fiber import errors
from fiber.transport.remote import pack_exception, unpack_exception


def test_public_errors_subclass_multiprocessing_ones():
    assert issubclass(errors.ProcessError, multiprocessing.ProcessError)
    # where multiprocessing asserts (start twice, join unstarted): code catches AssertionError
    assert issubclass(errors.ProcessStateError, AssertionError)
    assert issubclass(errors.ProcessStateError, errors.ProcessError)
    assert issubclass(errors.TimeoutError, multiprocessing.TimeoutError)
    assert issubclass(errors.AuthenticationError, multiprocessing.AuthenticationError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.UnknownBackendError, ValueError)
    assert issubclass(errors.TransportError, ConnectionError)
    for cls in (errors.ProcessError, errors.ConfigError, errors.BackendError):
        assert issubclass(cls, fiber.FiberError)
    assert concurrent.futures  # imported for parity with later executor tests


def test_remote_exception_keeps_type_and_traceback():
    try:
        {}["missing"]
    except KeyError as e:
        record = pack_exception(e)
    exc = unpack_exception(record)
    assert isinstance(exc, KeyError)
    assert isinstance(exc.__cause__, errors.RemoteTraceback)
    assert "missing" in str(exc.__cause__) and "Traceback" in str(exc.__cause__)


def test_unpicklable_exception_becomes_remote_error():
    class Local(Exception):
        def __init__(self, a, b):
            super().__init__(a)

    try:
        raise Local(1, 2)
    except Local as e:
        record = pack_exception(e)
    exc = unpack_exception(record)
    assert isinstance(exc, errors.RemoteError) and "Local" in str(exc)


def test_submit_error_carries_command_output():
    e = errors.SubmitError("sbatch failed", ["sbatch", "x"], 1, "", "bad partition")
    assert "sbatch x" in str(e) and "bad partition" in str(e) and e.returncode == 1


def test_a_config_error_crosses_processes_as_itself():
    """A ConfigError failed a pool's tasks as ``RemoteError: ConfigError: ...`` (its
    arguments are not its message: it did not unpickle), "remote" with nothing remote."""
    import pickle

    e = errors.ConfigError("log_file", "cannot write", where="FIBER_LOG_FILE")
    for back in (pickle.loads(pickle.dumps(e)), unpack_exception(pack_exception(e))):
        assert type(back) is errors.ConfigError
        assert (str(back), back.key, back.where) == (str(e), "log_file", "FIBER_LOG_FILE")
    e = errors.ConfigError("backnd", "unknown key", valid=["backend"])
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
