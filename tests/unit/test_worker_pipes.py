"""A job of several workers reads each worker's output pipes (fiber.pool._tagged), with
real pipes and a real selector, as the group's loop does."""

from __future__ import annotations

import os
import selectors

from fiber.pool._tagged import WorkerPipes


def _capture() -> tuple:
    """A pipe standing for the group's fd 1: (read end, write end)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


def _watched(pipes: WorkerPipes, worker_id: int) -> tuple:
    """A worker's pipes as the group holds them after the fork: their write ends are
    the worker's (returned: stdout's, stderr's)."""
    made = pipes.make()
    out_w, err_w = os.dup(made[1]), os.dup(made[3])
    pipes.watch(worker_id, f"PoolWorker-{worker_id}", made)
    return out_w, err_w


def test_a_stream_drained_earlier_in_the_same_round_is_skipped():
    """The select names a worker's stream, and its end (the group's wake pipe) first:
    the group drains the stream to its end and may make a new worker's pipes on its fd;
    the stale event must neither fail (the job's process died of a KeyError) nor read or
    close the new worker's pipe."""
    r, w = _capture()
    selector = selectors.DefaultSelector()
    pipes = WorkerPipes(selector)
    out_w, err_w = _watched(pipes, 1)
    for stream in pipes.streams.values():
        stream.target = w
    os.write(out_w, b"last words\n")
    os.close(out_w)
    os.close(err_w)
    events = selector.select(0)
    assert events  # the worker's pipes are readable: its line, then their end
    pipes.drain(1)  # it ended: read to the end, closed, forgotten
    assert not pipes.streams
    new_out, new_err = _watched(pipes, 2)  # a new worker: its pipes may take the old fds
    for stream in pipes.streams.values():
        stream.target = w
    os.write(new_out, b"first words\n")
    for key, _ in events:  # the round's stale events
        pipes.read(key.data)
    assert sorted(s.fd for s in pipes.streams.values()) == sorted(
        key.fd for key in selector.get_map().values())
    assert len(pipes.streams) == 2  # the new worker's pipes are still read
    for key, _ in selector.select(0):
        pipes.read(key.data)
    assert os.read(r, 4096) == b"(PoolWorker-1) last words\n(PoolWorker-2) first words\n"
    for fd in (new_out, new_err, r, w):
        os.close(fd)
    selector.close()
