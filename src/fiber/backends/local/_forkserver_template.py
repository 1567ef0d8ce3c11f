"""The fork server's template process: preload, then fork jobs on request.

Started by the local backend as ``python -m fiber.backends.local._forkserver_template FD``;
its only channel is the inherited end of a private ``SOCK_SEQPACKET`` socketpair (``FD``).
The master's side and the protocol are in `fiber.backends.local._forkserver`; the
message framing both use is in `fiber.backends.local._forkserver_protocol`.
"""

from __future__ import annotations

import errno
import gc
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from fiber._preload import import_modules
from fiber._process_state import here
from fiber.backends._job_command import BOOTSTRAP_MODULE
from fiber.backends.local._forkserver_protocol import (
    MAX_MESSAGE,
    MODULE,
    UNTOUCHED_SIGNALS,
    ForkOps,
    recv_message,
    send_message,
)
from fiber.transport.sockets import readable

if TYPE_CHECKING:
    import types


def _template(fd: int) -> None:
    """The template's main loop: preload, then fork on request and report exits."""
    import importlib
    import importlib.util
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the jobs, not for us
    sock = socket.socket(fileno=fd)
    msg = recv_message(sock, 1 << 20)
    if msg is None:
        return
    init, _ = msg
    # What every job imports (the bootstrap module, and fiber with it: the pool worker,
    # pipes, queues), then the master's packages.
    import cloudpickle  # noqa: F401

    spec = importlib.util.find_spec(BOOTSTRAP_MODULE)
    if spec is None or spec.loader is None:
        send_message(sock, {"op": ForkOps.ERROR, "error": f"cannot find {BOOTSTRAP_MODULE}"})
        return
    bootstrap = importlib.import_module(BOOTSTRAP_MODULE)
    own_path, own_argv = list(sys.path), list(sys.argv)
    # preloaded modules see the master's path and argv, as its jobs will
    sys.path[:] = list(init.get("sys_path") or own_path)
    sys.argv[:] = list(init.get("argv") or own_argv)
    preloaded, failed, threaded = import_modules(init.get("preload", []))
    if threaded:
        send_message(sock, {"op": ForkOps.ERROR,
                            "error": f"importing {threaded!r} started a thread (set "
                            "local_preload to the modules to preload without it)"})
        return
    sys.path[:], sys.argv[:] = own_path, own_argv
    send_message(sock, {"op": ForkOps.READY, "pid": here.pid, "preloaded": preloaded,
                 "failed": failed})

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    context = _ChildContext(sock, (wake_r, wake_w), spec, bootstrap)
    while True:
        _reap(sock)
        ready = readable([sock.fileno(), wake_r], None)
        if wake_r in ready:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        if sock.fileno() in ready:
            msg = recv_message(sock, MAX_MESSAGE)
            if msg is None:
                return  # the master ended
            request, fds = msg
            if request.get("op") != ForkOps.FORK:
                for f in fds:
                    os.close(f)
                continue
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            # The child's collections must not walk (and so copy, page by page) the
            # template's objects: they are never garbage.
            gc.freeze()
            try:
                with warnings.catch_warnings():  # native threads (BLAS pools) are fork-safe
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError as e:
                for f in fds:
                    os.close(f)
                send_message(sock, {"op": ForkOps.FORK_FAILED, "id": request["id"],
                                    "error": str(e)})
                continue
            if pid == 0:
                context.run(request, fds)  # never returns
            for f in fds:
                os.close(f)
            try:
                pidfd: List[int] = [os.pidfd_open(pid)]
            except OSError:
                pidfd = []
            try:
                send_message(sock, {"op": ForkOps.FORKED, "id": request["id"], "pid": pid}, pidfd)
            finally:
                for f in pidfd:
                    os.close(f)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        send_message(sock, {"op": ForkOps.EXIT, "pid": pid, "code": code})


class _ChildContext:
    """What a forked child needs to become a fresh ``python -m`` of the bootstrap module."""

    def __init__(self, sock: socket.socket, fds: Tuple[int, int],
                 spec: Any, bootstrap: types.ModuleType) -> None:
        self.sock = sock
        self.fds = fds
        self.spec = spec
        self.bootstrap = bootstrap
        cwd = os.getcwd()
        #: sys.path[0] of ``python -m`` is the working directory it started in.
        self.path0 = cwd if sys.path and sys.path[0] == cwd else None
        #: The template's signal handlers and environment, which every child inherits:
        #: a child changes only what differs (reading them anew costs ~1 ms a child).
        #: A handler installed outside Python (None) is left as it is: faulthandler's,
        #: under ``-X faulthandler`` or PYTHONFAULTHANDLER, is what a new interpreter
        #: would install too, and a job's crash dump (SIGSEGV, SIGABRT...) needs it.
        self.handlers = {}
        for sig in signal.valid_signals():
            if isinstance(sig, signal.Signals) and sig.name not in UNTOUCHED_SIGNALS:
                try:
                    handler = signal.getsignal(sig)
                except (OSError, ValueError):
                    continue
                if handler is not None:
                    self.handlers[int(sig)] = handler
        self.environ = dict(os.environ)

    def run(self, request: Dict[str, Any], fds: List[int]) -> None:
        exitcode = 1
        try:
            self._become(request, fds)
            exitcode = self._bootstrap(request)
        except SystemExit as e:
            exitcode = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    if stream is not None:
                        stream.flush()
                except Exception:
                    pass
            os._exit(exitcode)

    def _become(self, request: Dict[str, Any], fds: List[int]) -> None:
        self.sock.close()
        signal.set_wakeup_fd(-1)
        for f in self.fds:
            os.close(f)
        ignored = set(request.get("ignored", []))
        for sig, handler in self.handlers.items():
            want: Any = (signal.SIG_IGN if sig in ignored
                         else signal.default_int_handler if sig == signal.SIGINT
                         else signal.SIG_DFL)
            if handler != want:
                try:
                    signal.signal(sig, want)
                except (OSError, ValueError, TypeError):
                    pass
        fds = list(fds)
        for target, present in zip((1, 2), request.get("stdio", [])):
            if present and fds:
                f = fds.pop(0)
                os.dup2(f, target)
                os.close(f)
        inherited = {name: fds.pop(0) for name in request.get("inherit", []) if fds}
        for f in fds:
            os.close(f)
        out: Any = sys.stdout
        if out is not None and hasattr(out, "reconfigure"):  # as a new interpreter would
            out.reconfigure(line_buffering=os.isatty(1) and not out.write_through)
        env = request["env"]
        for key in self.environ:
            if key not in env:
                del os.environ[key]
        for key, value in env.items():
            if self.environ.get(key) != value:
                os.environ[key] = value
        for key, fd in inherited.items():
            os.environ[key] = str(fd)
        cwd = request.get("cwd")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError:
                pass
            if self.path0 is not None and sys.path and sys.path[0] == self.path0:
                sys.path[0] = cwd
        # Per-process state made at import in the template: fresh in every child, as in a
        # new interpreter (fiber's own is renewed by the bootstrap).
        _reseed_numpy()

    def _bootstrap(self, request: Dict[str, Any]) -> int:
        """Run the bootstrap's ``main()`` with ``__main__`` and ``sys.argv`` as ``python -m``
        of its module makes them. Its code is the module the template imported, not run
        again in ``__main__``: that cost each child ~0.2 ms and ~75 page copies (a
        Pool(512)'s start-up path), to define what the template had defined already."""
        import builtins
        import types

        main = types.ModuleType("__main__")
        main.__dict__.update(__file__=self.spec.origin, __cached__=None,
                             __loader__=self.spec.loader, __package__=self.spec.parent,
                             __spec__=self.spec, __builtins__=builtins)
        sys.modules["__main__"] = main
        argv = list(request.get("argv", []))
        rest = argv[argv.index("-m") + 2:] if "-m" in argv else []
        sys.argv = [self.spec.origin, *rest]
        self.bootstrap.main()  # ends with os._exit (the job's exit code)
        return 0


def _reseed_numpy() -> None:
    """Give numpy's global generator (``numpy.random.rand`` & co.) a state of its own, as a
    new interpreter's import of numpy does: its whole Mersenne Twister state (624 words)
    drawn from the OS, no Gaussian cached. ``numpy.random.seed()`` would do the same
    through a SeedSequence at ~2.5 times the cost (~0.5 ms and ~120 page copies a child,
    measured on Pool(512)'s start-up path)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is None:
        return
    try:
        key = sys.modules["numpy"].frombuffer(os.urandom(624 * 4), dtype="uint32")
        numpy_random.set_state(("MT19937", key, 624))
    except Exception:  # a numpy without the legacy global state: nothing shared to renew
        pass


def _main() -> None:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.stderr.write(f"{MODULE} is started by fiber's local backend, not by hand\n")
        sys.exit(2)
    try:
        _template(int(sys.argv[1]))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the master ended while we wrote to it
    except OSError as e:
        if e.errno not in (errno.EBADF, errno.ENOTCONN):
            raise
    os._exit(0)


if __name__ == "__main__":
    _main()
