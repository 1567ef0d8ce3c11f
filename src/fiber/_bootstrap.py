"""The entry point of every fiber job: ``python -m fiber._bootstrap``.

Reads the parent's hub address and the job token from the environment, fetches the launch
payload (see :mod:`fiber._launcher`), runs the process, reports its exit code, and exits.
A watchdog thread ends the job when the parent goes away.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import threading
import time
import traceback

_exiting = threading.Event()

#: How long a job whose parent is gone lets its threads run before it ends, when it has
#: handed out ``parent_process().sentinel``: a thread waiting on it wakes and can react
#: (the multiprocessing idiom), yet the job never outlives its parent for long.
SENTINEL_GRACE_S = 0.5


def _watch_parent(address: str) -> None:
    """End this job when its lifeline to the parent drops (no orphans, ever).

    The lifeline is the anchor connection to the parent's hub: nothing is ever sent on
    it after the handshake, so a read returns only when it closes (the parent ended or
    was killed) or fails (keepalive probes found the parent's host unreachable).

    ``parent_process().sentinel`` turns readable first (and ``is_alive()`` False); the
    job's own children are ended next, then the job, after ``SENTINEL_GRACE_S`` if
    anyone took the sentinel.
    """
    from .transport.client import ensure_anchor

    sock = ensure_anchor(address).sock
    try:
        while sock.recv(1):
            pass
    except OSError:
        pass
    if _exiting.is_set():
        return
    from . import process

    watched = process._parent_gone()
    sys.stderr.write(f"fiber: parent at {address} is gone; job {os.getpid()} exits\n")
    sys.stderr.flush()
    for child in list(process._children):
        try:
            child.kill()
        except Exception:
            pass
    if watched:
        time.sleep(SENTINEL_GRACE_S)
    os._exit(1)


def main() -> None:
    from . import _launcher, _runtime, config, process

    parent = os.environ.get(_runtime.PARENT_ENV, "")
    token_hex = os.environ.pop(_runtime.JOB_ENV, "")
    if not parent or not token_hex:
        sys.stderr.write("fiber._bootstrap is started by fiber, not by hand\n")
        sys.exit(2)
    token = bytes.fromhex(token_hex)
    try:
        payload = _launcher.fetch_payload(parent, token)
    except BaseException as e:
        sys.stderr.write(f"fiber: job cannot start: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(1)
    # listen_host names an address of the parent's host: a child finds its own.
    config._install(dataclasses.replace(payload["config"], listen_host=""))
    lifeline = threading.Thread(target=_watch_parent, args=(parent,), name="fiber-lifeline",
                                daemon=True)
    lifeline.start()
    # As a spawn child of multiprocessing: the parent's sys.path in its order (then what
    # only this host has), its sys.argv (a module that parses arguments at import sees
    # the program's), before anything of the user's is unpickled.
    parent_path = list(payload["sys_path"])
    sys.path[:] = parent_path + [e for e in sys.path if e not in parent_path]
    sys.argv[:] = payload["argv"]
    cwd = payload["cwd"]
    if os.path.isdir(cwd):
        os.chdir(cwd)
    process._set_parent(*payload["parent"])
    # Taken out of the payload, which lives as long as this function: a process's large
    # arguments are then held once (as objects), not twice (their pickle too).
    pickled = payload.pop("process")
    try:
        spawn = payload.get("spawn")
        if spawn is None:
            proc = pickle.loads(pickled)
        else:  # it holds objects of multiprocessing itself: start as spawn does
            from ._fd_handoff import load_spawned

            proc = load_spawned(pickled, spawn)
        del pickled
    except BaseException:
        sys.stderr.write("fiber: cannot unpickle the process object in the job:\n")
        traceback.print_exc()
        exitcode = 1
    else:
        exitcode = proc._bootstrap()
    try:
        _launcher.report_exit(parent, token, exitcode)
    except Exception:
        pass  # the parent is gone or busy; the backend still sees our exit code
    from .transport import client

    _exiting.set()
    _runtime.shutdown_hub()
    client.close_all()
    lifeline.join(timeout=5)
    os._exit(exitcode)


if __name__ == "__main__":
    main()
