"""A program's snapshot (`fiber._core._inspect.snapshot`, with its pools' counts of every
worker: see `fiber.dashboard.page`) as Prometheus metrics, in the text exposition format
(version 0.0.4) that every Prometheus scrapes, with no exporter and no client library:
the format is a few lines of text.

Every pool's series carry the label ``pool`` (its name, ``Pool-1``...). The counters
(``_total``) count since the pool started; a pool that ended drops out.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

__all__ = ["render", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

WORKER_STATES = ("starting", "idle", "running", "retiring")

#: (name, type, help, the pool's value)
_POOL_SERIES: Tuple[Tuple[str, str, str, str], ...] = (
    ("fiber_pool_size", "gauge", "Workers the pool keeps.", "size"),
    ("fiber_pool_tasks_pending", "gauge", "Tasks queued, held by no worker.", "pending"),
    ("fiber_pool_tasks_running", "gauge",
     "Tasks held by workers (the one each runs and those prefetched).", "running"),
    ("fiber_pool_tasks_done_total", "counter", "Tasks that returned a value.", "done"),
    ("fiber_pool_tasks_failed_total", "counter",
     "Tasks that raised, or failed because their worker was lost too often.", "failed"),
    ("fiber_pool_tasks_retried_total", "counter",
     "Tasks given back to the queue by a lost worker (each time).", "retried"),
    ("fiber_pool_tasks_per_second", "gauge", "Tasks completed a second, over 10 s.",
     "tasks_per_s"),
    ("fiber_pool_sent_bytes_total", "counter",
     "Bytes sent to the pool's workers on their connections (tasks with their arguments "
     "and functions, answers to the workers' calls).", "bytes_sent"),
    ("fiber_pool_received_bytes_total", "counter",
     "Bytes received from the pool's workers on their connections (results, the "
     "workers' calls).", "bytes_received"),
)

#: (name, help, the pool's histogram)
_POOL_HISTOGRAMS: Tuple[Tuple[str, str, str], ...] = (
    ("fiber_pool_task_duration_seconds",
     "How long tasks ran, as their workers measured (a batch of quick tasks: each at the "
     "batch's mean).", "durations"),
    ("fiber_pool_result_latency_seconds",
     "From a task's submission to its result's arrival at the master.", "latency"),
)


def _label(value: Any) -> str:
    text = str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _lines(snap: Dict[str, Any]) -> Iterator[str]:
    pools = [p for p in snap.get("pools", []) if "error" not in p]
    for name, kind, text, key in _POOL_SERIES:
        yield f"# HELP {name} {text}"
        yield f"# TYPE {name} {kind}"
        for pool in pools:
            yield f'{name}{{pool="{_label(pool["name"])}"}} {float(pool.get(key, 0)):g}'
    for name, text, key in _POOL_HISTOGRAMS:
        yield f"# HELP {name} {text}"
        yield f"# TYPE {name} histogram"
        for pool in pools:
            yield from _histogram(name, _label(pool["name"]), pool.get(key))
    yield "# HELP fiber_pool_workers Workers by state."
    yield "# TYPE fiber_pool_workers gauge"
    for pool in pools:
        counts = dict.fromkeys(WORKER_STATES, 0)
        counts.update(pool.get("worker_states", {}))
        for state, n in counts.items():
            yield f'fiber_pool_workers{{pool="{_label(pool["name"])}",state="{state}"}} {n}'
    yield "# HELP fiber_pool_worker_restarts_total Workers started to replace lost ones."
    yield "# TYPE fiber_pool_worker_restarts_total counter"
    for pool in pools:
        restarts = pool.get("restarts", 0)
        yield f'fiber_pool_worker_restarts_total{{pool="{_label(pool["name"])}"}} {restarts}'
    yield "# HELP fiber_processes Processes this program started, by state."
    yield "# TYPE fiber_processes gauge"
    for state, n in sorted(snap.get("process_states", {}).items()):
        yield f'fiber_processes{{state="{_label(state)}"}} {n}'
    yield "# HELP fiber_warnings_total Warnings fiber logged (lost workers, retirements...)."
    yield "# TYPE fiber_warnings_total counter"
    yield f"fiber_warnings_total {int(snap.get('warnings_total', 0))}"
    if isinstance(snap.get("cluster"), dict):  # None: not asked yet (an attached one)
        yield from _jobs(snap)


def _histogram(name: str, pool: str, hist: Any) -> Iterator[str]:
    if not hist:
        return
    for bound, count in hist["buckets"]:
        le = bound if isinstance(bound, str) else f"{float(bound):g}"
        yield f'{name}_bucket{{pool="{pool}",le="{le}"}} {count}'
    yield f'{name}_sum{{pool="{pool}"}} {float(hist["sum"]):g}'
    yield f'{name}_count{{pool="{pool}"}} {hist["count"]}'


def _jobs(snap: Dict[str, Any]) -> Iterator[str]:
    yield "# HELP fiber_jobs This program's live jobs as their cluster sees them, by state."
    yield "# TYPE fiber_jobs gauge"
    for backend, states in sorted(snap["cluster"].get("jobs", {}).items()):
        for state, n in sorted(states.items()):
            yield f'fiber_jobs{{backend="{_label(backend)}",state="{_label(state)}"}} {n}'


def render(snap: Dict[str, Any]) -> str:
    """The metrics of one snapshot, as a Prometheus scrape's body."""
    return "\n".join(_lines(snap)) + "\n"
