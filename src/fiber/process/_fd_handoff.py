"""Objects of ``multiprocessing`` itself handed to a fiber job of this host. Fiber's
transport carries no file descriptors, so such a process is started as multiprocessing's
``spawn`` start method starts one, when the backend's jobs share this host. The design:
docs/contributing/processes.md, "Objects of multiprocessing handed to a job"."""

from __future__ import annotations

import functools
import io
import os
import pickle
import socket
import sys
from collections import ChainMap
from multiprocessing import AuthenticationError, heap, reduction, resource_sharer
from multiprocessing import connection as mp_connection
from multiprocessing import context as mp_context
from multiprocessing import process as mp_process
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple, Type

from .._core._served import add_handoff, collecting_handoffs
from ..backends import Backend
from ..errors import ProcessError
from ..transport.serialization import _Pickler

__all__ = ["pickle_process", "load_spawned", "multiprocessing_authkey", "adopt_authkey"]


def multiprocessing_authkey() -> bytes:
    """This process's ``multiprocessing`` authkey, which each of its jobs takes
    (`adopt_authkey`), as a child that ``multiprocessing`` spawns takes its parent's: the
    standard library's resource sharer (a Connection or socket sent through a pipe, see
    `fiber.transport.serialization`) and its ``Listener``/``Client`` and managers then
    authenticate every process of the program alike."""
    return bytes(mp_process.current_process().authkey)


def adopt_authkey(authkey: bytes) -> None:
    """In a job: take its parent's ``multiprocessing`` authkey (the setter that
    ``multiprocessing`` documents)."""
    mp_process.current_process().authkey = authkey


class _NeedsSpawn(Exception):
    """The process holds an object that only multiprocessing's spawning can pickle."""


def _needs_spawn(obj: object) -> NoReturn:
    raise _NeedsSpawn(type(obj).__name__)


class _ProbingPickler(_Pickler):
    """Fiber's pickler, stopped by what would otherwise pickle wrong: a
    ``multiprocessing`` Connection would copy its descriptor's number; a socket and the
    shared memory behind multiprocessing's ``Value``, ``Array`` and ``heap`` (an ``Arena``:
    an mmap of a file descriptor) fail."""

    dispatch_table = ChainMap({mp_connection.Connection: _needs_spawn,
                               socket.socket: _needs_spawn,
                               heap.Arena: _needs_spawn}, _Pickler.dispatch_table)


#: The message of ``multiprocessing.context.assert_spawning``.
_ASSERT_SPAWNING = "through inheritance"


def pickle_process(proc: Any, backend: Backend) -> Tuple[bytes, Optional[Dict[str, object]]]:
    """The pickled process object, and what the child needs before it unpickles it (None
    unless the process holds objects of multiprocessing itself).

    Pickled apart from the launch payload, so that the child unpickles it once it has the
    parent's ``sys.path`` (its target may live in a module found through it). As every
    other pickle, functions of ``__main__`` go by value into the one namespace the job
    keeps for them (a pool's initializer sets the globals its tasks read), unless the
    process holds multiprocessing's objects (see the module's docstring).

    Raises:
        ProcessError: the process holds multiprocessing's objects and ``backend``'s jobs
            do not share this host.
        RuntimeError: called while this job imports its parent's main script.
        pickle.PicklingError, TypeError, AttributeError: something cannot be pickled.
    """
    # What was handed over before a failure (a descriptor registered with the resource
    # sharer, a fiber pipe end) is released at once: no job will ever take it.
    with collecting_handoffs() as handoffs:
        try:
            result = _pickle_process(proc, backend)
        except BaseException:
            _release(handoffs)
            raise
    for release in handoffs:  # released when the job ends
        add_handoff(release)
    return result


def _release(handoffs: List[Callable[[], None]]) -> None:
    for release in handoffs:
        try:
            release()
        except Exception:
            pass


def _pickle_process(proc: Any, backend: Backend
                    ) -> Tuple[bytes, Optional[Dict[str, object]]]:
    if getattr(mp_process.current_process(), "_inheriting", False):
        raise RuntimeError(
            "a process was started while this job imports its parent's main script (as "
            "multiprocessing's spawn does for a job handed multiprocessing's own objects); "
            "start processes under 'if __name__ == \"__main__\":' in the main script")
    try:
        out = _dumps(_ProbingPickler, proc)
        return out, None
    except _NeedsSpawn:
        pass
    except RuntimeError as e:
        if _ASSERT_SPAWNING not in str(e):
            raise
    if not backend.jobs_share_host:
        raise ProcessError(
            f"{proc.name} is handed objects of multiprocessing itself (a multiprocessing "
            "Pipe, Queue or lock, or concurrent.futures.ProcessPoolExecutor's call queue), "
            "whose file descriptors and semaphores reach only processes of this host; jobs "
            f"of backend {backend.name!r} may run on other hosts or in containers. Use "
            "fiber's own (fiber.Pipe, fiber.Queue, fiber.futures.Executor) or a backend "
            "whose jobs share this host (local)")
    return _dumps_as_spawn(proc), _spawn_data()


def _dumps(pickler: Type[pickle.Pickler], obj: object) -> bytes:
    out = io.BytesIO()
    pickler(out, 5).dump(obj)
    return out.getvalue()


def _dumps_as_spawn(proc: Any) -> bytes:
    previous = mp_context.get_spawning_popen()
    mp_context.set_spawning_popen(_SpawningPopen())  # type: ignore[arg-type, unused-ignore]
    try:
        return _dumps(reduction.ForkingPickler, proc)
    except Exception as e:
        if hasattr(e, "add_note"):  # Python 3.11+
            e.add_note(f"fiber: {proc.name} is handed objects of multiprocessing itself, so "
                       "it starts as multiprocessing's spawn starts a process: everything "
                       "is pickled by reference, and multiprocessing's queues and locks "
                       "must come from a 'spawn' or 'forkserver' context")
        raise
    finally:
        mp_context.set_spawning_popen(previous)


def _spawn_data() -> Dict[str, object]:
    """What multiprocessing's spawn tells a child before it unpickles its process object:
    the authkey (the resource sharer's password) and how to import the main module."""
    data: Dict[str, object] = {"authkey": bytes(mp_process.current_process().authkey),
                            "sys_argv": list(sys.argv)}
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    path = getattr(main, "__file__", None)
    if name is not None:
        data["init_main_from_name"] = name
    elif path is not None:
        data["init_main_from_path"] = os.path.normpath(
            os.path.join(getattr(mp_process, "ORIGINAL_DIR", None) or "", path))
    return data


def load_spawned(pickled: bytes, data: Dict[str, object]) -> Any:
    """In the child: take the parent's authkey, import the main module as spawn does,
    then unpickle the process object (which fetches its descriptors)."""
    from multiprocessing import spawn

    me = mp_process.current_process()
    # what spawn's children set (multiprocessing's own state: no public API sets it)
    me._inheriting = True  # type: ignore[attr-defined]  # noqa: SLF001
    try:
        spawn.prepare(data)
        return pickle.loads(pickled)
    finally:
        del me._inheriting  # type: ignore[attr-defined]  # noqa: SLF001


class _SpawningPopen:
    """Stands for multiprocessing's ``Popen`` while a process is pickled as spawn does:
    ``assert_spawning`` passes, and ``reduction.DupFd`` asks it to hand a descriptor."""

    def duplicate_for_child(self, fd: int) -> int:
        return fd  # _SharedFd duplicates it

    def DupFd(self, fd: int) -> _SharedFd:  # noqa: N802 - the name reduction.DupFd calls
        return _SharedFd(fd)


class _SharedFd:
    """A descriptor for a job of this host: a duplicate registered with the standard
    library's resource sharer, fetched once by the unpickling process."""

    def __init__(self, fd: int) -> None:
        self._shared = resource_sharer.DupFd(fd)
        add_handoff(functools.partial(_withdraw, self._shared))

    def detach(self) -> int:
        """Fetch the descriptor from the parent (only once).

        Raises:
            ProcessError: the parent's resource sharer cannot be reached (this job is not
                on its host) or no longer has the descriptor.
        """
        try:
            return int(self._shared.detach())
        except (OSError, EOFError, AuthenticationError, KeyError) as e:
            address = getattr(self._shared, "_id", ("?",))[0]
            raise ProcessError(
                f"cannot receive a file descriptor of a multiprocessing object from the "
                f"parent's resource sharer at {address} ({type(e).__name__}: {e}): such "
                "objects reach only jobs on the parent's host that start while it "
                "runs") from e


def _withdraw(shared: Any) -> None:
    """The job ended: close its descriptor if it never fetched it (the standard library
    would keep it open for the life of the program)."""
    sharer = getattr(resource_sharer, "_resource_sharer", None)
    # the resource sharer's own state: it has no API to withdraw a descriptor
    try:
        key = shared._id[1]  # noqa: SLF001
        with sharer._lock:  # type: ignore[union-attr]  # noqa: SLF001
            entry = sharer._cache.pop(key, None)  # type: ignore[union-attr]  # noqa: SLF001
    except (AttributeError, TypeError, IndexError):
        return  # a later Python changed the sharer: the descriptor stays, as it would
    if entry is not None:
        entry[1]()
