"""The entry point of every fiber job: ``python -m fiber.process._bootstrap``.

Reads the parent's hub address and the job token from the environment, fetches the launch
payload (see `fiber.process._launcher`), runs the process, reports its exit code, and
exits. A watchdog thread follows the job's lifelines (`fiber.process._lineage`): it
tells ``parent_process()`` when the parent is gone, and ends the job when the program is.

The local backend's fork server preloads this module and runs it as ``__main__`` in each
job it forks from its template (see `fiber.backends.local._forkserver`): what the
template made of fiber's per-process state (its process id, its resolved config) is made
anew first, as a new interpreter would have it.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pickle
import select
import socket
import sys
import threading
import time
import traceback
from typing import Any, Optional, Tuple

from .. import _log, config
from .._core import _runtime
from .._core._clients import adopt_anchor, ensure_anchor
from .._process_state import here
from ..transport import channels, client, cpus, credentials
from ..transport.serialization import fetch_sources_with
from . import _inspected, _launcher, _lineage, _output, _parent, _title
from ._fd_handoff import adopt_authkey, load_spawned
from ._method import set_default_method
from ._process import kill_children, run_in_job

#: How long a job whose program is gone lets its threads run before it ends, when one
#: of them may be waiting for ``parent_process()`` (its sentinel, ``join``): it wakes and
#: can react (the multiprocessing idiom), yet the job never outlives the program for long.
SENTINEL_GRACE_S = 0.5


def _watched(address: str) -> socket.socket:
    """The lifeline to ``address``: its anchor's socket, on a descriptor of its own (the
    thread that replaces a reset anchor closes the anchor's own)."""
    return ensure_anchor(address).sock.dup()


def _again(address: str, ended: socket.socket, events: int) -> Tuple[Optional[socket.socket], str]:
    """The lifeline to ``address`` ended (``ended``, closed here): a new one if the end
    was a reset of a TCP connection (a link's, or a middlebox's: not its peer's end, nor a
    timeout, which is its host's silence past the heartbeat's grace) and the hub answers
    a new connection; else None, and why (the job's log says it as it ends)."""
    try:
        error = ended.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        tcp = ended.family in (socket.AF_INET, socket.AF_INET6)
    finally:
        ended.close()
    anchor = channels.current_anchor(address)
    if anchor is not None and anchor.lost:  # its reader may have taken the error first
        error = error or anchor.error
    if not tcp:
        return None, "its Unix socket ended"
    if not events & (select.POLLERR | select.POLLHUP):
        return None, "it ended its connection"
    if error == errno.ETIMEDOUT:
        return None, "its host was silent past the heartbeat's grace"
    if anchor is not None:
        anchor.found_ended()  # its thread may not know yet: the next call connects anew
    try:  # a link that resets connections may reset the new ones too
        return client.again_on_a_new_connection(lambda: _watched(address)), ""
    except Exception as e:  # refused (gone), reset each time, or unreachable past the grace
        return None, f"its connection was reset ({os.strerror(error) if error else 'no error'}), " \
                     f"and a new one failed: {e}"


def _watch_lifelines(parent: str, master: str, parent_line: socket.socket) -> None:
    """Follow this job's lifelines (see `fiber.process._lineage`): the parent's end
    makes ``parent_process()`` dead; the program's end ends this job (no orphans, ever).
    ``parent_line`` is the parent's (`_watched`), taken by the main thread before the
    job's target runs, so that the job's descriptors do not depend on this thread's
    timing; the master's, which may need a connection, is taken here.

    A lifeline is the anchor connection to a hub. The main thread makes its calls on it
    (see ``transport.channels.get_client``), so this thread never reads from it: it waits
    for the peer's end of the stream (``POLLRDHUP``: the process ended or was killed) or
    an error (keepalive probes found its host unreachable). A TCP connection reset while
    the hub lives is made again, here or by the thread that uses it (`_again`).
    """
    exiting = here.jobs.bootstrap_exiting
    if exiting.is_set():  # the job ended before this thread ran: nothing to watch
        parent_line.close()
        return
    lines = {parent: parent_line}
    if master != parent:
        try:
            lines[master] = _watched(master)
        except Exception as e:  # unreachable from here: the parent's lifeline is the one
            sys.stderr.write(f"fiber: job {here.pid} cannot reach the program's main "
                             f"process at {master} ({e}); it ends with its parent\n")
            master = parent
    poller = select.poll()
    for sock in lines.values():
        poller.register(sock, select.POLLRDHUP)
    while lines:
        ended = {fd: events for fd, events in poller.poll()}
        if exiting.is_set():
            return
        for address, sock in list(lines.items()):
            events = ended.get(sock.fileno())
            if events is None:
                continue
            poller.unregister(sock)
            again, why = _again(address, sock, events)
            if again is not None:
                lines[address] = again
                poller.register(again, select.POLLRDHUP)
            elif address == master:
                _end_with_program(master, master != parent, why)
            else:  # the parent ended, the program goes on: so does this job
                del lines[address]
                _parent.parent_gone()
                _output.parent_gone()  # nobody reads its forwarded output: to its log


def _end_with_program(address: str, is_master: bool, why: str) -> None:
    """The program's main process is gone: ``parent_process()`` turns dead (its waiters
    get ``SENTINEL_GRACE_S`` to react), this job's children are ended, then the job."""
    watched = _parent.parent_gone()
    _output.parent_gone()  # to the job's own log: nobody may read its pipes any more
    who = "the program's main process" if is_master else "parent"
    try:
        sys.stderr.write(f"fiber: {who} at {address} is gone ({why}); job {here.pid} "
                         "exits\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a stderr nobody reads must not keep the job from ending
    kill_children()
    if watched:
        time.sleep(SENTINEL_GRACE_S)
    os._exit(1)


#: Seconds a job's end waits, at most, for the servers to serve the messages without a
#: reply it sent (its puts: see `fiber.transport.client.sync_unanswered`): a server that
#: does not answer cannot hold the job's exit for longer.
EXIT_SYNC_S = 10.0


#: Seconds a job tries to make its first connection to its parent: a job may start
#: before its network is up (a pod's, while its node sets it up).
FIRST_CONNECT_S = 60.0


def _fetch_payload(parent: str, token: bytes) -> Any:
    """The launch payload, its first connection tried again (nothing was sent) for up to
    `FIRST_CONNECT_S` while the parent's host does not answer: a pod's first connect can
    time out at 10 s. A refusal is final: the parent is gone (killed while the
    job was starting), and the job must end at once, not outlive it."""
    deadline = time.monotonic() + FIRST_CONNECT_S
    while True:
        try:
            return _launcher.fetch_payload(parent, token)
        except client.CannotConnect as e:
            if e.refused or time.monotonic() >= deadline:
                raise
            sys.stderr.write(f"fiber: job {here.pid} {e}; trying again\n")
            time.sleep(1.0)


def _take_anchor(parent: str) -> None:
    """This job's anchor to its parent, if it was handed one (a local job: see
    ``fiber.process._launcher.handing_anchors``), with the process id that goes with it;
    else a new process id (a forked job must not keep its template's)."""
    fd = os.environ.pop(_runtime.ANCHOR_FD_ENV, "")
    process_id = os.environ.pop(_runtime.PROCESS_ID_ENV, "")
    if fd and process_id and parent:
        adopt_anchor(parent, socket.socket(fileno=int(fd)), bytes.fromhex(process_id))
    else:
        client.renew_process_id()


def main() -> None:
    # Until the program's config arrives (in the payload), the defaults: resolving this
    # host's own (environment, .fiberconfig) would be work thrown away. But its TLS mode
    # and credentials (or a site's files) come with it: its first connections need them.
    config.install(config.Config(**credentials.take_inherited()))
    # its TLS, before its first connection: what it inherited (it makes none of its own)
    credentials.prepare(config.get_config(), remote_jobs=False)
    parent = os.environ.get(_runtime.PARENT_ENV, "")
    token_hex = os.environ.pop(_runtime.JOB_ENV, "")
    if not parent or not token_hex:
        sys.stderr.write("fiber.process._bootstrap is started by fiber, not by hand\n")
        sys.exit(2)
    token = bytes.fromhex(token_hex)
    # first, before any thread or connection: a relay-fed job forks here, and this
    # process stays as its relay (see _relay)
    _output.split_for_relay(parent, token)
    _take_anchor(parent)
    cpus.open_load()  # now, not at its first poll (see open_load)
    try:
        payload = _fetch_payload(parent, token)
    except BaseException as e:
        sys.stderr.write(f"fiber: job cannot start: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(1)
    # listen_host names an address of the parent's host: a child finds its own.
    config.install(dataclasses.replace(payload["config"], listen_host=""))
    if payload.get("log_level") is not None:  # the parent program set its logger's level
        _log.inherit_level(payload["log_level"])
    ensure_anchor(parent).retune()  # the program's heartbeat, not the defaults
    _lineage.set_master_address(payload.get("master") or parent)
    _output.start()
    # functions of the parent's __main__ whose file this host lacks: the parent has it
    fetch_sources_with(lambda filename: _launcher.fetch_source(parent, filename))
    master = payload.get("lifeline") or parent  # what ends this job (see _lineage)
    lifeline = threading.Thread(target=_watch_lifelines,
                                args=(parent, master, _watched(parent)),
                                name="fiber-lifeline", daemon=True)
    lifeline.start()
    if config.get_config().dashboard and master == parent:
        _inspected.serve_parent(parent, token)  # its stacks and usage, for the dashboard
    # As a spawn child of multiprocessing: the parent's sys.path in its order (then what
    # only this host has), its sys.argv (a module that parses arguments at import sees
    # the program's), multiprocessing authkey and start method, before anything of the
    # user's is unpickled.
    parent_path = list(payload["sys_path"])
    sys.path[:] = parent_path + [e for e in sys.path if e not in parent_path]
    sys.argv[:] = payload["argv"]
    cwd = payload["cwd"]
    if os.path.isdir(cwd):
        os.chdir(cwd)
    _parent.set_parent(*payload["parent"])
    adopt_authkey(payload["mp_authkey"])
    set_default_method(payload["start_method"])
    # Taken out of the payload, which lives as long as this function: a process's large
    # arguments are then held once (as objects), not twice (their pickle too).
    pickled = payload.pop("process")
    try:
        spawn = payload.get("spawn")
        if spawn is None:
            proc = pickle.loads(pickled)
        else:  # it holds objects of multiprocessing itself: start as spawn does
            proc = load_spawned(pickled, spawn)
        del pickled
    except BaseException:
        sys.stderr.write("fiber: cannot unpickle the process object in the job:\n")
        traceback.print_exc()
        exitcode = 1
    else:
        # ps and top show "fiber: PoolWorker-3 of es.py", not the bootstrap's command
        _title.set_title(_title.title_of(proc.name, sys.argv), proc.name)
        exitcode = run_in_job(proc)
    # what it put (its threads too) is served before its exit can be seen: a parent that
    # joins it, then its queue, finds the items there (see sync_unanswered)
    channels.deliver_orphans_now()
    client.sync_unanswered(EXIT_SYNC_S)
    _output.stop()  # what it wrote reaches the parent before its exit report
    try:
        _launcher.report_exit(parent, token, exitcode, _output.relayed())
    except Exception:
        pass  # the parent is gone or busy; the backend still sees our exit code
    here.jobs.bootstrap_exiting.set()
    _runtime.shutdown_hub()
    channels.close_all()
    lifeline.join(timeout=5)
    os._exit(exitcode)


if __name__ == "__main__":
    main()
