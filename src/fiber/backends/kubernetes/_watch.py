"""The ``kubernetes`` backend's view of its program's pods: one list, then a watch.

`PodCache` applies a list and the watch's events to the last known state of each pod
(plain data, tested offline); `PodWatch` is the one thread per cluster that feeds it, so
that a status poll reads memory instead of listing every pod: O(changes) of traffic,
not O(pods) a poll. Invariants (docs/backends/kubernetes.md, "How status is watched"):

- a pod the cache has never seen is not lost: its creation's event may be on its way;
- a pod deleted keeps its last state (``DELETED`` carries it, a relist that misses a pod
  keeps the one it had), so a job reads as ended from what its pod last said;
- the watch resumes from the last ``resourceVersion`` it saw (an event's or a bookmark's);
  only a ``410 Gone`` (that version is too old) makes it list again.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional, Set, Tuple

from ..._backoff import retrying
from ..._log import log
from ..._process_state import here
from .._base import JobStatus
from .._common import import_extra
from ._pods import api_reason, pod_status

if TYPE_CHECKING:
    import types

__all__ = ["PodCache", "PodWatch", "trim", "last_status"]

Pod = Dict[str, Any]

#: Seconds after which the API server ends each watch (it is resumed at once): also the
#: longest a connection that died without a word can go unnoticed, plus the read timeout.
WATCH_SECONDS = 60
_GONE_KEPT = 4096  # deleted pods remembered that no job of this process asked about
HTTP_GONE = 410


def _k8s() -> types.ModuleType:
    return import_extra("kubernetes", "kubernetes", "the Kubernetes Python client")


def trim(pod: Pod) -> Pod:
    """What `pod_status` reads of a pod (its JSON), and nothing else: the cache holds one
    of these a pod, a few hundred bytes instead of the API's 5-8 KB."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    out_status: Dict[str, Any] = {k: status[k] for k in ("phase", "reason", "message")
                                  if k in status}
    if containers:
        out_status["containerStatuses"] = [
            {k: containers[0][k] for k in ("image", "state") if k in containers[0]}]
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduled:
        out_status["conditions"] = scheduled
    out_meta = {k: meta[k] for k in ("name", "labels", "deletionTimestamp") if k in meta}
    return {"metadata": out_meta, "status": out_status}


def last_status(pod: Optional[Pod], deleted: bool, **kw: Any) -> Tuple[JobStatus, str]:
    """`pod_status` of a pod's last known state (None: it is known to be gone); a pod
    deleted before it ended is gone (``LOST``, or ``CANCELLED`` when fiber signalled it)."""
    st, blocked = pod_status(pod, **kw)
    if deleted and not st.state.finished:
        return pod_status(None, **kw)
    return st, blocked


class PodCache:
    """The last known state of each pod, by the value of its ``job_label``; thread-safe."""

    def __init__(self, job_label: str, gone_kept: int = _GONE_KEPT) -> None:
        self._label = job_label
        self._lock = threading.Lock()
        self._pods: Dict[str, Pod] = {}
        #: Deleted pods' last states, oldest first (bounded: no job may ever ask).
        self._gone: collections.OrderedDict[str, Pod] = collections.OrderedDict()
        self._gone_kept = gone_kept
        #: Jobs whose end was read: their pods' later events are dropped until DELETED.
        self._forgotten: Set[str] = set()
        #: Where the watch resumes; "" until the first list.
        self.resource_version = ""

    def _job(self, pod: Pod) -> str:
        meta = pod.get("metadata") or {}
        return str((meta.get("labels") or {}).get(self._label) or meta.get("name") or "")

    def _bury(self, job: str, pod: Pod) -> None:
        self._gone[job] = pod
        self._gone.move_to_end(job)
        while len(self._gone) > self._gone_kept:
            self._gone.popitem(last=False)

    def replace(self, items: Iterable[Pod], resource_version: str) -> None:
        """A list's answer: the state of every pod as of ``resource_version``. A pod known
        before and not listed now was deleted meanwhile (its events were missed)."""
        listed = {self._job(p): trim(p) for p in items}
        with self._lock:
            for job in set(self._pods) - set(listed):
                self._bury(job, self._pods[job])
            self._forgotten &= set(listed)
            self._pods = {j: p for j, p in listed.items() if j not in self._forgotten}
            for job in listed:
                self._gone.pop(job, None)
            self.resource_version = resource_version

    def apply(self, kind: str, obj: Pod) -> bool:
        """One watch event (``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK``) and its
        object; True when it may end a job (its pod ended, or is gone)."""
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if version:
                self.resource_version = version
            if kind not in ("ADDED", "MODIFIED", "DELETED"):
                return False
            job, pod = self._job(obj), trim(obj)
            if job in self._forgotten:
                if kind == "DELETED":
                    self._forgotten.discard(job)
                return False
            if kind == "DELETED":
                self._pods.pop(job, None)
                self._bury(job, pod)
                return True
            self._pods[job] = pod
            self._gone.pop(job, None)
        return pod_status(pod)[0].state.finished

    def lookup(self, job: str) -> Tuple[Optional[Pod], bool]:
        """The job's pod as last known, and whether it was deleted; ``(None, False)``:
        never seen."""
        with self._lock:
            pod = self._pods.get(job)
            if pod is not None:
                return pod, False
            gone = self._gone.get(job)
            return gone, gone is not None

    def expire(self) -> None:
        """The watch's resourceVersion is too old (410 Gone): the next watch lists first.
        The pods stay known meanwhile."""
        with self._lock:
            self.resource_version = ""

    def forget(self, job: str) -> None:
        """The job's end has been read: drop its pod, now and as later events come."""
        with self._lock:
            present = self._pods.pop(job, None) is not None
            self._gone.pop(job, None)
            if present:
                self._forgotten.add(job)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)


class PodWatch:
    """One thread that lists the pods of a label selector, then watches them (the
    official client's ``kubernetes.watch.Watch``), feeding a `PodCache`.

    ``on_end`` is called (on the thread) when an event may end a job. While the API
    server cannot be reached the thread retries with backoff; the cache keeps what it knew.
    """

    def __init__(self, api: Any, namespace: str, selector: str, job_label: str,
                 timeout: float, on_end: Callable[[], None]) -> None:
        self.cache = PodCache(job_label)
        self.pid = here.pid  # a forked child has no thread: it starts its own
        self._api, self._namespace, self._selector = api, namespace, selector
        self._timeout, self._on_end = timeout, on_end
        self._synced = threading.Event()
        self._tried = threading.Event()  # the first list was answered, or failed
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._watch: Any = None  # the running kubernetes.watch.Watch
        self._down_since: Optional[float] = None
        self._error = ""
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"fiber-k8s-watch-{namespace}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread (at once with a client that can interrupt a watch's read, else
        at its next event; waits up to 2 s)."""
        self._stopped.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.stop()
        if self._thread is not threading.current_thread() and self._thread.ident:
            self._thread.join(timeout=2)

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first list has been read (waiting up to ``timeout`` s for its
        answer or its failure)."""
        self._tried.wait(timeout)
        return self._synced.is_set()

    def down(self) -> Tuple[float, str]:
        """For how long the API server has not answered (0: it answers), and its error."""
        with self._lock:
            if self._stopped.is_set():
                return float("inf"), "the watch was stopped"
            if self._down_since is None:
                return 0.0, ""
            return time.monotonic() - self._down_since, self._error

    def _up(self) -> None:
        with self._lock:
            if self._down_since is not None:
                log("kubernetes: watching pods in %s again", self._namespace)
            self._down_since = None

    def _failed(self, e: BaseException) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                log("kubernetes: cannot watch pods in %s: %s", self._namespace, api_reason(e))
            self._error = api_reason(e)
        self._tried.set()

    def _run(self) -> None:
        backoff = retrying()  # while the API server cannot be reached
        while not self._stopped.is_set():
            try:
                if not self.cache.resource_version:
                    self._list()
                self._watch_once()
                backoff.reset()
            except Exception as e:
                if self._stopped.is_set():
                    return
                if getattr(e, "status", None) == HTTP_GONE:  # too old: list again, at once
                    log("kubernetes: pods in %s: %s; listing them again", self._namespace,
                        api_reason(e))
                    self.cache.expire()
                    continue
                self._failed(e)
                self._stopped.wait(backoff.next())

    def _list(self) -> None:
        resp = self._api.list_namespaced_pod(self._namespace, label_selector=self._selector,
                                             _preload_content=False,
                                             _request_timeout=self._timeout)
        body = json.loads(resp.data)
        self.cache.replace(body.get("items") or [],
                           str((body.get("metadata") or {}).get("resourceVersion") or ""))
        self._up()
        self._synced.set()
        self._tried.set()
        self._on_end()  # a pod may have ended while nobody watched

    def _connect(self, *args: object, **kwargs: object) -> object:
        """``list_namespaced_pod`` for the watch: an answer's headers (the client raises
        an error status) say the API server can be reached again."""
        resp = self._api.list_namespaced_pod(*args, **kwargs)
        self._up()
        return resp

    def _watch_once(self) -> None:
        """One watch from the cache's resourceVersion, until the API server ends it."""
        # "object": events as the JSON the API sent, not the client's Pod models
        w = _k8s().watch.Watch(return_type="object")
        with self._lock:
            if self._stopped.is_set():
                return
            self._watch = w
        try:
            for event in w.stream(self._connect, self._namespace,
                                  label_selector=self._selector,
                                  resource_version=self.cache.resource_version,
                                  timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True,
                                  _request_timeout=(self._timeout,
                                                    WATCH_SECONDS + self._timeout)):
                if self.cache.apply(str(event.get("type")), event.get("raw_object") or {}):
                    self._on_end()
        finally:
            with self._lock:
                self._watch = None
