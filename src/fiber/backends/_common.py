"""Small helpers shared by cluster backends: parallel calls, mount lists, local addresses."""

from __future__ import annotations

import importlib
import itertools
import signal
import socket
import threading
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Callable,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from .._version import install_hint
from ..errors import BackendError, ConfigError, SubmitError

if TYPE_CHECKING:
    import types

__all__ = ["import_extra", "mount_items", "parallel", "parse_mounts", "route_to", "route_toward",
           "signal_name", "hosts_to_avoid", "PARALLEL"]

#: Cluster calls in flight for one submit, cancel or cleanup.
PARALLEL = 8

T = TypeVar("T")
R = TypeVar("R")


def parallel(fn: Callable[[T], R], items: Sequence[T],
             width: int = PARALLEL) -> List[Tuple[Optional[R], Optional[BaseException]]]:
    """``fn`` over ``items`` from up to ``width`` short-lived threads, in order, as
    ``(result, None)`` or ``(None, exception)``.

    Plain threads, not an executor: this also runs at interpreter exit, after executors
    refuse new work. A pool of 100 workers is then not 100 cluster round trips in a row.
    Python 3.12 and later start no thread once the interpreter's exit has begun: the calls
    are then made in this thread, one after the other.
    """
    out: List[Tuple[Optional[R], Optional[BaseException]]] = [(None, None)] * len(items)

    def call(i: int) -> None:
        try:
            out[i] = (fn(items[i]), None)
        except Exception as e:
            out[i] = (None, e)

    if len(items) <= 1:
        for i in range(len(items)):
            call(i)
        return out
    index = itertools.count()
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(index)
            if i >= len(items):
                return
            call(i)

    threads = []
    for k in range(min(width, len(items))):
        t = threading.Thread(target=work, name=f"fiber-call-{k}", daemon=True)
        try:
            t.start()
        except RuntimeError:  # interpreter exit: the calls left are made by this thread
            break
        threads.append(t)
    if not threads:
        work()
    for t in threads:
        t.join()
    return out


def mount_items(text: str) -> Iterator[Tuple[str, List[str], bool]]:
    """The items of a mount list ``a[:b][:ro|rw],...``: each item, its parts without the
    mode, and whether it is read-only; the caller checks the parts."""
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        read_only = False
        if len(parts) > 1 and parts[-1] in ("ro", "rw"):
            read_only = parts.pop() == "ro"
        yield item, parts, read_only


def parse_mounts(key: str, text: str) -> List[Tuple[str, str, bool]]:
    """A mount list ``src[:dst][:ro|rw],...`` (config key ``key``) as ``(src, dst,
    read_only)`` triples; the destination defaults to the source path."""
    mounts = []
    for item, parts, read_only in mount_items(text):
        if len(parts) == 1:
            parts.append(parts[0])
        if len(parts) != 2 or not all(p.startswith("/") for p in parts):
            raise ConfigError(key, f"expected host_path[:container_path][:ro] with absolute "
                              f"paths, got {item!r}")
        mounts.append((parts[0], parts[1], read_only))
    return mounts


def route_to(host: str) -> str:
    """The local address the kernel would use to reach ``host`` (no packet is sent)."""
    infos = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return str(s.getsockname()[0])


def route_toward(host: str, what: str, name_fix: str, reached_by: str) -> str:
    """`route_to` ``host``, or a BackendError that says why there is no route (``what``
    names the host in it: "the Slurm controller 'ctl'").

    ``listen_host`` is suggested only where it is the remedy: the name resolves but no
    local address routes to it. A name that does not resolve is a wrong name or a DNS
    problem (``name_fix`` says where the name comes from), which no address of ours mends.
    """
    try:
        return route_to(host)
    except socket.gaierror as e:
        raise BackendError(f"{what} does not resolve ({e.strerror}): {name_fix}") from None
    except OSError as e:
        raise BackendError(f"no local address routes to {what} ({e.strerror or e}); set "
                           "listen_host (FIBER_LISTEN_HOST) to this machine's address that "
                           f"{reached_by} reach") from None


def hosts_to_avoid(avoid: AbstractSet[str], listed: Iterable[str]) -> List[str]:
    """The hosts of ``avoid`` (a pool's suspected ones, ``JobSpec.avoid_hosts``) that a
    scheduler is told to keep a job off, of those it ``listed``: best effort, so none
    when they are all of them (the job would never start)."""
    hosts = set(listed)
    return sorted(hosts & set(avoid)) if hosts - set(avoid) else []


def signal_name(n: int) -> str:
    """``SIGTERM`` for 15; ``signal 99`` for a number that names no signal."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def import_extra(module: str, backend: str, what: str) -> types.ModuleType:
    """``module``, the client library a backend needs, or a SubmitError naming the extra
    of fiber that installs it (the extra named as the backend) and how."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise SubmitError(f"the {backend} backend needs {what} (the `{module}` package), "
                          f"which is not installed: {install_hint(backend)}") from e
