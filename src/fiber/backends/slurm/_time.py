"""Slurm's times: the formats of ``--time``, and the notice a job asks for before its
limit (``--signal=B:USR1@N``: the batch shell, which is the job's output relay, gets it and
passes it on; a pool worker then retires, see ``fiber.pool._retire``)."""

from __future__ import annotations

from typing import Optional

__all__ = ["time_limit_seconds", "notice_seconds"]


def time_limit_seconds(text: str) -> Optional[float]:
    """Slurm's ``--time`` in seconds: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S``; None if ``text`` is none of these (``infinite`` and ``0`` too)."""
    days, _, rest = text.rpartition("-") if "-" in text else ("", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        d = int(days) if days else 0
    except ValueError:
        return None
    if days:  # D-H, D-H:M, D-H:M:S
        if not 1 <= len(parts) <= 3:
            return None
        h, m, sec = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:
        h, (m, sec) = 0, parts
    elif len(parts) == 3:
        h, m, sec = parts
    else:
        return None
    total = ((d * 24 + h) * 60 + m) * 60 + sec
    return float(total) if total > 0 else None


def notice_seconds(limit: float) -> int:
    """How long before a job's time limit it asks Slurm for a notice: a quarter of the
    limit, between 10 s and 120 s (Slurm checks limits every 30 s: it may come later)."""
    return int(max(10, min(120, limit / 4)))
