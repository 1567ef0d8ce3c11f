"""PyTorch's ``DataLoader(multiprocessing_context=ctx)`` with a fiber context: its workers
are fiber processes, its queues and event fiber's.

A fiber context is a ``multiprocessing.context.BaseContext``, which the DataLoader checks;
it calls the context's ``Queue()``, ``Event()`` and ``Process(...)`` (daemonic), and
watches its workers by ``pid`` and ``is_alive()``. A batch crosses fiber's queue pickled
by value (fiber's pickler, not ``ForkingPickler`` with torch's shared-memory reductions):
the caller gets a copy, not a tensor in shared memory.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import time
from typing import Any, List

import pytest

import fiber
from fiber.testing.conformance.support.waiting import wait_until

# torch is imported in the tests: a stage without torch deselects them (marker torch)
pytestmark = [pytest.mark.torch,  # 4 workers on this machine's 2 CPUs, on purpose:
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]

WORKERS = 4


class Items:
    """A map-style dataset. Item ``i``: ``[i, i*i]`` (a 256x256 tensor of ``i`` with
    ``big``), a random number drawn in the worker (seeded by the DataLoader per worker),
    the worker's id and their number."""

    def __init__(self, n: int = 40, big: bool = False, fail_at: int = -1,
                 delay_s: float = 0.0) -> None:
        self.n, self.big, self.fail_at, self.delay_s = n, big, fail_at, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if i == self.fail_at:
            raise ValueError(f"item {i} is bad")
        import torch

        time.sleep(self.delay_s)
        info = torch.utils.data.get_worker_info()
        data = torch.full((256, 256), float(i)) if self.big else torch.tensor([i, i * i])
        return data, torch.rand(1).item(), info.id, info.num_workers


def batches(loader: Any) -> List[Any]:
    return [[x.tolist(), r.tolist(), w.tolist(), n.tolist()] for x, r, w, n in loader]


def loader(ctx: Any, dataset: Any = None, **kwargs: Any) -> Any:
    from torch.utils.data import DataLoader

    kwargs = {"num_workers": WORKERS, "batch_size": 3, **kwargs}
    return DataLoader(dataset or Items(), multiprocessing_context=ctx, **kwargs)


def seeded(seed: int = 7) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


def test_a_fiber_context_is_taken_by_the_dataloader():
    ctx = fiber.get_context()
    assert loader(ctx).multiprocessing_context is ctx  # its isinstance check: no TypeError


@pytest.mark.parametrize("shuffle", [False, True])
def test_same_batches_as_the_standard_librarys_context(shuffle):
    stdlib = batches(loader(multiprocessing.get_context("spawn"), shuffle=shuffle,
                            generator=seeded()))
    ours = batches(loader(fiber.get_context(), shuffle=shuffle, generator=seeded()))
    assert ours == stdlib
    # every worker served items, with the DataLoader's seeds (equal random draws above)
    assert {w for batch in ours for w in batch[2]} == set(range(WORKERS))
    items = sorted(i for batch in ours for i, _ in batch[0])
    assert items == list(range(len(Items())))
    if shuffle:
        assert [i for batch in ours for i, _ in batch[0]] != items


def test_persistent_workers_serve_every_epoch():
    data = loader(fiber.get_context(), persistent_workers=True, generator=seeded())
    try:
        first = batches(data)
        workers = list(data._iterator._workers)
        assert all(isinstance(w, fiber.Process) and w.is_alive() for w in workers)
        for _ in range(2):  # the same items from the same workers (their draws go on)
            again = batches(data)
            assert [(b[0], b[2]) for b in again] == [(b[0], b[2]) for b in first]
            assert again != first
        assert list(data._iterator._workers) == workers
    finally:
        del data
        gc.collect()  # the iterator's end ends its workers
    wait_until(lambda: not any(w.is_alive() for w in workers), timeout=30)
    assert all(w.exitcode == 0 for w in workers)


def test_a_batch_is_a_copy_not_shared_memory():
    """torch collates a worker's batch into shared memory; fiber's pickler sends it by
    value, so the caller's tensor is its own (as it must be on another host)."""
    (x, *_), = list(loader(fiber.get_context(), Items(n=3, big=True)))
    assert not x.is_shared()
    assert x.shape == (3, 256, 256) and [x[k].mean().item() for k in range(3)] == [0, 1, 2]
    x += 1  # writable
    assert x[2, 0, 0].item() == 3


def _error_of(data: Any) -> str:
    """The error iterating ``data`` raises, as text: no traceback is kept, so that the
    iterator (in a reference cycle after an error: gc) ends, and its workers with it."""
    try:
        batches(data)
    except Exception as e:  # noqa: BLE001 - the caller checks which
        error = f"{type(e).__name__}: {e}"
    else:
        raise AssertionError("no error")
    gc.collect()
    return error


def test_an_exception_in_a_worker_is_raised_in_the_caller():
    err = _error_of(loader(fiber.get_context(), Items(fail_at=7)))
    assert err.startswith("ValueError: Caught ValueError in DataLoader worker process")
    assert "item 7 is bad" in err  # the worker's traceback


def test_a_killed_worker_is_the_dataloaders_error_not_a_hang():
    workers: List[Any] = []

    def kill_one(data: Any) -> Any:
        """``data``'s batches, once one of its workers has been SIGKILLed."""
        it = iter(data)
        next(it)
        workers.extend(it._workers)
        os.kill(workers[0].pid, signal.SIGKILL)
        return it

    t0 = time.monotonic()
    err = _error_of(kill_one(loader(fiber.get_context(), Items(delay_s=0.3), num_workers=2,
                                    batch_size=1)))
    assert time.monotonic() - t0 < 30  # the DataLoader checks its workers every 5 s
    # as with the standard library's context: "pid(s) N) exited unexpectedly" or, from its
    # SIGCHLD handler, "(pid N) is killed by signal"
    assert re.match(rf"RuntimeError: DataLoader worker \(pid(\(s\))? {workers[0].pid}\) ", err), err
    assert workers[0].exitcode == -signal.SIGKILL
    wait_until(lambda: not workers[1].is_alive(), timeout=30)
