"""Data-parallel SGD on a fiber Ring: torch's DistributedDataParallel (gloo backend).

Each member of the ring is a fiber job (a subprocess here, a Slurm job or a pod on a
cluster); ``fiber.Ring`` sets the rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE...)
so that a member only calls ``dist.init_process_group("gloo")``. Every step, the global
batch is split between the members, each computes the gradient of its share and DDP
averages the gradients: the model follows the same path as one process training on the
whole global batch, which this program checks at the end.

    python examples/ddp_ring.py                       # 4 members, 300 steps, local jobs
    python examples/ddp_ring.py --members 2 --steps 50
    FIBER_BACKEND=slurm python examples/ddp_ring.py   # members are Slurm jobs

The data is generated (a fixed random classification problem): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import fiber

FEATURES, CLASSES, SAMPLES = 16, 4, 2048


def make_data(seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """A fixed classification problem: labels from a random linear map plus noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.5 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def make_model() -> nn.Module:
    torch.manual_seed(1234)  # every member starts from the same weights (DDP checks)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, CLASSES))


def batch_indices(step: int, global_batch: int) -> torch.Tensor:
    """The samples of the global batch of ``step`` (an epoch-wise shuffle, seeded)."""
    per_epoch = SAMPLES // global_batch
    epoch, i = divmod(step, per_epoch)
    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))
    return order[i * global_batch:(i + 1) * global_batch]


def _full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))


def train(rank: int, size: int, steps: int, global_batch: int, lr: float
          ) -> Dict[str, Any]:
    """One member of the ring: its share of every global batch, gradients averaged by
    DDP. Returns the loss of every global batch and the loss on all data at the end."""
    if global_batch % size:
        raise ValueError(f"global batch {global_batch} does not split into {size} members")
    torch.set_num_threads(1)  # members share the host's CPUs
    dist.init_process_group("gloo")
    try:
        x, y = make_data()
        model = nn.parallel.DistributedDataParallel(make_model())
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        share = global_batch // size
        losses = []
        for step in range(steps):
            idx = batch_indices(step, global_batch)[rank * share:(rank + 1) * share]
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()  # DDP: the gradient is averaged over the members here
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)  # the global batch's loss: the mean of the shares'
            losses.append(float(mean) / size)
        return {"losses": losses, "final": _full_loss(model.module, x, y),
                "host": fiber.ring.current_member().addresses[rank]}  # type: ignore[union-attr]
    finally:
        dist.destroy_process_group()


def train_single(steps: int, global_batch: int, lr: float) -> Dict[str, Any]:
    """The same training in one process, on the whole global batch each step."""
    torch.set_num_threads(1)
    x, y = make_data()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        idx = batch_indices(step, global_batch)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"losses": losses, "final": _full_loss(model, x, y)}


def train_on_ring(members: int, steps: int, global_batch: int = 64, lr: float = 0.2,
                  context: Optional[fiber.FiberContext] = None, timeout: float = 600
                  ) -> Dict[str, Any]:
    """Train on a ring of ``members`` jobs; rank 0's result (every rank's is the same)."""
    ring = fiber.Ring(members, train, args=(steps, global_batch, lr), context=context,
                      cpu=1)
    results: List[Dict[str, Any]] = ring.run(timeout=timeout)
    assert all(r["final"] == results[0]["final"] for r in results), "members disagree"
    return results[0] | {"hosts": ring.hosts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=4,
                        help="members of the ring, one job each (4)")
    parser.add_argument("--steps", type=int, default=300, help="SGD steps (300)")
    parser.add_argument("--global-batch", type=int, default=64,
                        help="samples per step, split between the members (64)")
    parser.add_argument("--lr", type=float, default=0.2, help="learning rate (0.2)")
    args = parser.parse_args()
    print(f"backend: {fiber.get_config().backend}; {args.members} members, {args.steps} "
          f"steps, global batch {args.global_batch}")
    start = time.time()
    ring = train_on_ring(args.members, args.steps, args.global_batch, args.lr)
    took = time.time() - start
    for step in sorted({0, args.steps // 2, args.steps - 1}):
        print(f"step {step:4d}: global batch loss {ring['losses'][step]:.4f}")
    print(f"ring of {args.members} on {', '.join(sorted(set(ring['hosts'])))}: loss on all "
          f"data {ring['final']:.5f} after {args.steps} steps, {took:.1f} s (with start-up)")
    single = train_single(args.steps, args.global_batch, args.lr)
    gap = max(abs(a - b) for a, b in zip(ring["losses"], single["losses"]))
    same = math.isclose(ring["final"], single["final"], rel_tol=1e-4, abs_tol=1e-5)
    print(f"one process on the same global batches: loss {single['final']:.5f}; largest "
          f"step-loss difference {gap:.2e}: {'the same' if same else 'DIFFERENT'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
