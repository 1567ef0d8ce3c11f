"""PyTorch's DataLoader with the netns context: its workers on three hosts give the
batches of the standard library's spawn context (tensors copied across hosts, not in
shared memory); a worker SIGKILLed on its host is the DataLoader's error, not a hang."""

import gc
import multiprocessing
import os
import signal
import time

import _common
import torch
from torch.utils.data import DataLoader, get_worker_info

import fiber

WORKERS = 3


class Items:
    """Item ``i``: a 128x128 tensor of ``i``, a draw of the worker's seeded generator and
    the worker's id; ``delay_s`` per item."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return 30

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return torch.full((128, 128), float(i)), torch.rand(1).item(), get_worker_info().id


def loader(ctx, dataset=None, **kwargs):
    return DataLoader(dataset or Items(), batch_size=4, num_workers=WORKERS, shuffle=True,
                      generator=torch.Generator().manual_seed(5), multiprocessing_context=ctx,
                      **kwargs)


def batches(it):
    return [[x[:, 0, 0].tolist(), r.tolist(), w.tolist(), x.is_shared()] for x, r, w in it]


def same_batches():
    stdlib = batches(loader(multiprocessing.get_context("spawn")))
    it = iter(loader(fiber.get_context()))
    workers = list(it._workers)
    ours = batches(it)
    return dict(same=[b[:3] for b in ours] == [b[:3] for b in stdlib],
                shared=sorted({b[3] for b in ours}), stdlib_shared=sorted({b[3] for b in stdlib}),
                worker_hosts=[w.host for w in workers], worker_exitcodes=_ends(workers))


def _ends(workers):
    _common.join_all(workers)
    return [w.exitcode for w in workers]


def killed_worker():
    it = iter(loader(fiber.get_context(), Items(delay_s=0.3)))
    workers = list(it._workers)
    next(it)
    os.kill(workers[1].pid, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        batches(it)
        error = "none"
    except RuntimeError as e:
        error = str(e)
    seconds = round(time.monotonic() - t0, 1)
    del it
    gc.collect()  # the iterator ends its other workers
    return dict(error=error, seconds=seconds, victim_pid=workers[1].pid,
                victim_host=workers[1].host, exitcodes=_ends(workers))


def main():
    hosts = _common.setup()
    _common.result(expected_hosts=[h for h, _ in hosts.hosts], **same_batches(),
                   killed=killed_worker())


if __name__ == "__main__":
    main()
