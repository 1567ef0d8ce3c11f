"""What a pool says when it loses a worker: one warning per worker lost, in the order
they were lost, once its exit code is known; an initializer's failures in a row said
once. The rules: docs/contributing/pools.md, "Losses"."""

from __future__ import annotations

import collections
from typing import Deque, Dict, List, Optional, Protocol, Sequence, Tuple

from .._log import warn
from ..errors import WorkerLostError
from ..process._job import describe_end
from ..process._process import exitcode_of
from ._state import Given, Loss, Task, WorkerState

__all__ = ["Loss", "Losses", "Given", "InitFailures", "exit_code", "describe_exit", "tasks_text",
           "given_text", "given_of", "name_held", "where", "report", "report_job"]

#: Seconds a lost worker's warning (and the WorkerLostError of a task that killed its
#: workers) waits for its job's exit code. A normal end is reported in milliseconds
#: locally and in a few seconds by a cluster; a busy Kubernetes node took over 10 s (the
#: error then said "still running or unknown"). It is as long as a lossy link's grace
#: (``heartbeat_timeout``'s default): only a job whose end is never reported waits it out.
REPORT_WAIT_S = 30.0
_MAX_LISTED = 10  # task indexes named per call in a warning
_MAX_NAMED = 8  # workers named in a job's warning


class Placed(Protocol):
    """A task as a warning names it (a `Task`, or the `Given` record of one): its id,
    its call, and the places of its items in the call."""

    task_id: int
    call: str
    first: int
    items: int


class Losses:
    """A pool's warnings of lost workers not said yet, in the order the workers were lost
    (all under the hub's lock)."""

    def __init__(self) -> None:
        self._unsaid: Deque[WorkerState] = collections.deque()

    def add(self, ws: WorkerState, loss: Loss) -> None:
        """Worker ``ws`` was lost: its warning is said once `ready`, after those of
        the workers lost before it."""
        ws.loss = loss
        self._unsaid.append(ws)

    def ready(self, ws: WorkerState) -> None:
        """Worker ``ws``'s exit code is known (or will not be): say its warning, and the
        later ones that were waiting for it, unless an earlier one is still waiting."""
        if ws.loss is not None:
            ws.loss.ready = True
        while self._unsaid and (self._unsaid[0].loss is None or self._unsaid[0].loss.ready):
            report(self._unsaid.popleft())


class InitFailures:
    """The failures of a pool's initializer since a worker last started (under the hub's
    lock): a pool whose initializer always raises says its traceback once, and how many
    workers failed the same way, not a traceback and a warning per worker."""

    def __init__(self) -> None:
        #: The traceback said last (the one a BrokenPoolError carries).
        self.last = ""
        self._repeats: List[str] = []  # workers that failed as ``last`` since it was said

    def failed(self, ws: Optional[WorkerState], tb: str) -> None:
        """Worker ``ws`` (None: one the pool no longer knows) says its initializer
        raised: a new traceback is said at once, a repeat is counted."""
        name = ws.name if ws is not None else "a worker"
        if tb == self.last:
            self._repeats.append(name)
            return
        self.said()
        self.last = tb
        place = f" ({where(ws)})" if ws is not None else ""
        warn("%s%s: the pool's initializer raised; the worker exits (workers that fail "
             "the same way are counted, not shown):\n%s", name, place, tb.rstrip("\n"))

    def said(self, outcome: str = "") -> None:
        """Say how many workers failed as the last traceback said, since it was, with
        the row's ``outcome`` ("; the pool is broken")."""
        if not self._repeats:
            return
        names = ", ".join(self._repeats[:_MAX_LISTED])
        if len(self._repeats) > _MAX_LISTED:
            names += f" and {len(self._repeats) - _MAX_LISTED} more"
        count = len(self._repeats)
        warn("the pool's initializer failed the same way in %d more worker%s (%s)%s",
             count, "s" if count > 1 else "", names, outcome)
        self._repeats = []

    def started(self) -> None:
        """A worker ran the initializer and started: the row of failures has ended."""
        self.said("; then a worker started")
        self.last = ""


def exit_code(ws: WorkerState) -> Optional[int]:
    """The worker's exit code as far as its backend has told (None: not yet)."""
    code: Optional[int] = ws.exitcode
    return exitcode_of(ws.process) if code is None else code


def describe_exit(ws: WorkerState) -> str:
    """"killed by SIGKILL: OOMKilled", "exit code 1", ...: the worker's end as known."""
    code = exit_code(ws)
    try:
        reason = ws.process.exit_reason if code is not None else ""
    except ValueError:
        reason = ""
    return describe_end(code, reason)


def tasks_text(tasks: Sequence[Placed]) -> str:
    """The tasks named by call and their items' places in it, as the task's label and
    the dashboard name them: ``map(f) tasks 3, 4, 8-11; apply(g) task 5`` (a chunk of
    a map is the range of its items; an ``apply`` is numbered among the pool's)."""
    by_call: Dict[str, List[str]] = collections.OrderedDict()
    for task in tasks:
        place = (str(task.first) if task.items == 1
                 else f"{task.first}-{task.first + task.items - 1}")
        by_call.setdefault(task.call, []).append(place)
    parts = []
    for call, places in by_call.items():
        shown = ", ".join(places[:_MAX_LISTED])
        if len(places) > _MAX_LISTED:
            shown += f" and {len(places) - _MAX_LISTED} more"
        many = len(places) > 1 or "-" in places[0]
        parts.append(f"{call} task{'s' if many else ''} {shown}")
    return "; ".join(parts)


def given_text(given: Sequence[Given], held: Sequence[Placed]) -> str:
    """The tasks ``given`` back at a worker's resumes, but those it holds (``held``,
    named as resubmitted), as `tasks_text` names them."""
    ids = {task.task_id for task in held}
    return tasks_text([g for g in given if g.task_id not in ids])


def given_of(tasks: Sequence[Task]) -> List[Given]:
    """``tasks`` as a warning keeps them (`Given`: not the tasks, which hold their
    call's results)."""
    return [Given(task.task_id, task.call, task.first, task.items) for task in tasks]


def name_held(loss: Loss, tasks: Sequence[Task], notes: Sequence[str]) -> None:
    """A worker lost holding nothing of its own was then said, by its job, to have held
    ``tasks`` (its end told after the master lost it): its warning, ``loss``, not said
    yet, names them too, with the ``notes`` of their charge."""
    if tasks:
        loss.tasks = "; ".join(text for text in (loss.tasks, tasks_text(tasks)) if text)
        loss.held = [*loss.held, *given_of(tasks)]
    loss.notes.extend(notes)


def where(ws: WorkerState) -> str:
    proc = ws.process
    job = proc.job_id
    host = proc.host
    if job and host:
        return f"job {job} on {host}"
    # no job id yet: its batch is still being submitted (it runs meanwhile, forked)
    return f"job {job}" if job else (f"on {host}" if host else "starting")


def report(ws: WorkerState) -> None:
    """Say, once, that worker ``ws`` was lost (if it was: see `Loss`)."""
    loss: Optional[Loss] = ws.loss
    if loss is None:
        return
    ws.loss = None
    what = "was lost" if loss.connected else "ended before it connected"
    code = exit_code(ws)
    how = describe_exit(ws) if code is not None else "contact lost (its end not reported yet)"
    text = f"{ws.name} ({where(ws)}) {what}: {how}"
    if loss.tasks:
        text += f"; resubmitted {loss.tasks}"
    elif loss.connected:
        text += "; it held no task"
    if loss.given:
        text += f"; {loss.given} lost in flight at an earlier reset of its connection, run again"
    if (code is None or not loss.connected) and ws.process.job_id:
        text += f"; its own log may say more (fiber logs {ws.process.job_id})"
    for note in loss.notes:
        text += f"; {note}"
    warn("%s", text)


def report_job(name: str, workers: Sequence[WorkerState]) -> None:
    """Say, once, that the job ``name`` (of several workers) ended and lost ``workers``
    (those of its workers whose loss was not said yet): one warning for the job, naming
    its host, how it ended, each worker and the tasks each held; not one a worker."""
    losses = [(ws, ws.loss) for ws in workers if ws.loss is not None]
    if not losses:
        return
    for ws, _ in losses:
        ws.loss = None
    first = losses[0][0]
    code = exit_code(first)
    how = describe_exit(first) if code is not None else "contact lost (its end not reported yet)"
    names = [ws.name for ws, _ in losses]
    if len(names) > _MAX_NAMED:
        names = names[:_MAX_NAMED - 1] + [f"{len(names) - _MAX_NAMED + 1} more"]
    text = (f"{name} ({where(first)}) was lost with {len(losses)} workers "
            f"({', '.join(names)}): {how}")
    held = sorted((task for _, loss in losses for task in loss.held),
                  key=lambda task: task.task_id)
    text += f"; resubmitted {tasks_text(held)}" if held else "; they held no task"
    if code is None and first.process.job_id:
        text += f"; its own log may say more (fiber logs {first.process.job_id})"
    for _, loss in losses:
        for note in loss.notes:
            text += f"; {note}"
    warn("%s", text)


def charge(ws: WorkerState, tasks: List[Task],
           max_retries: int) -> Tuple[List[str], Optional[Task]]:
    """Count worker ``ws``'s death against the ``tasks`` it held: the notes its warning
    carries, and the task that has now killed its worker too often, if one has (taken
    out of ``tasks``, not resubmitted: it fails with WorkerLostError). A task whose
    result came, or that another worker holds too (a copy, see `_late`), did not die
    with ``ws``: it is not charged."""
    for task in tasks:  # every death that held a task counts, once it is charged
        if not lives_on(task):
            task.attempts += (ws,)
    if len(tasks) != 1:
        # Any of them may have been running (results of quick tasks are sent in
        # batches): none is charged now; each runs alone until it completes.
        for task in tasks:
            task.suspect = True
        return [], None
    # It held one task: that task was running when the worker died. It is charged with
    # every death that held it (one among prefetched tasks, before it ran alone).
    culprit = tasks[0]
    if lives_on(culprit):
        return [], None
    n = len(culprit.attempts)
    if n > max_retries:
        tasks.clear()
        return [f"{culprit.label} killed its worker {n} times: it fails with "
                f"WorkerLostError (pool_max_task_retries={max_retries})"], culprit
    if n > 1:
        return [f"{culprit.label} has killed its worker {n} times (tried again up to "
                f"pool_max_task_retries={max_retries})"], None
    return [], None


def lives_on(task: Task) -> bool:
    """Whether ``task``, held by a worker just lost, lives on without it: its result
    came, or another worker holds it too (``held_by`` still counts the lost one)."""
    return task.done or task.held_by > 1


def lost_error(task: Task, max_retries: int) -> WorkerLostError:
    """The error of a task that killed its worker too often, naming each attempt's end."""
    lines = [f"  attempt {i}: worker {ws.worker_id} ({ws.name}) {describe_exit(ws)}"
             for i, ws in enumerate(task.attempts, 1)]
    return WorkerLostError(
        f"{task.label} killed its worker {len(task.attempts)} times; giving up "
        f"(pool_max_task_retries={max_retries}):\n" + "\n".join(lines))
