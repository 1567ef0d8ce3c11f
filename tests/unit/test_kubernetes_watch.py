"""The kubernetes backend's cache of its pods, fed by one list and then a watch's events:
applied on plain data (the pods' JSON as the API server sends it). No cluster needed:
tests/backends/kubernetes watches a real node's pods."""

from __future__ import annotations

import copy
import json
import signal
from typing import Any, Dict, List

import pytest

from fiber.backends import JobState
from fiber.backends.kubernetes import LABEL_JOB, pod_status
from fiber.backends.kubernetes._watch import PodCache, last_status, trim


def pod(job: str, phase: str = "Running", state: Any = None, rv: str = "1",
        **status: Any) -> Dict[str, Any]:
    """A pod as the API server sends it: metadata, spec and status in full."""
    state = {"running": {"startedAt": "2026-11-29T08:00:00Z"}} if state is None else state
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": job, "namespace": "fiber-test", "uid": f"uid-{job}", "resourceVersion": rv,
            "creationTimestamp": "2026-11-29T08:00:00Z",
            "labels": {"fiber.program": "abc", LABEL_JOB: job},
            "annotations": {"fiber.name": "PoolWorker-1", "fiber.master": "host:1"},
            "managedFields": [{"manager": "OpenAPI-Generator", "operation": "Update",
                               "apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "fiber",
                                                           "image": "img:1"}]},
        "status": {"phase": phase, "hostIP": "10.205.0.2", "podIP": "10.206.0.5",
                   "qosClass": "BestEffort",
                   "conditions": [{"type": "Initialized", "status": "True"},
                                  {"type": "PodScheduled", "status": "True"}],
                   "containerStatuses": [{"name": "fiber", "image": "img:1",
                                          "imageID": "docker://sha256:1", "ready": True,
                                          "restartCount": 0, "state": state}],
                   **status}}


def terminated(code: int, **more: Any) -> Dict[str, Any]:
    return {"terminated": {"exitCode": code, "containerID": "docker://c", **more}}


def bookmark(rv: str) -> Dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}


def status_of(cache: PodCache, job: str, **kw: Any) -> Any:
    found, deleted = cache.lookup(job)
    return last_status(found, deleted, **kw)[0]


# every state pod_status distinguishes, as the API server sends it
CASES: List[Dict[str, Any]] = [
    pod("a"),
    pod("a", "Pending", {"waiting": {"reason": "ContainerCreating"}}),
    pod("a", "Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}),
    pod("a", "Pending", {"waiting": {"reason": "ErrImageNeverPull", "message": "no"}}),
    pod("a", "Pending", {}, conditions=[{"type": "PodScheduled", "status": "False",
                                         "reason": "Unschedulable", "message": "0/1"}]),
    pod("a", "Succeeded", terminated(0)),
    pod("a", "Failed", terminated(3, message="bad")),
    pod("a", "Failed", terminated(137)),
    pod("a", "Failed", terminated(137, reason="OOMKilled")),
    pod("a", "Failed", {}, reason="Evicted", message="low on memory"),
    pod("a", "Unknown", {}, message="node lost"),
    {**pod("a", "Pending", {}), "metadata": {**pod("a")["metadata"],
                                              "deletionTimestamp": "2026-11-29T08:01:00Z"}},
]


@pytest.mark.parametrize("full", CASES)
@pytest.mark.parametrize("kw", [{}, {"signalled": [signal.SIGTERM]},
                                {"blocked_for": 99, "pending_timeout": 10, "memory_mb": 64}])
def test_a_trimmed_pod_has_the_status_of_the_full_one(full, kw):
    """The cache holds trimmed pods: what the status reads of them is what it reads of
    the pods in full, for every state, and a pod is a small part of what the API sent."""
    assert pod_status(trim(full), **kw) == pod_status(full, **kw)
    assert len(json.dumps(trim(full))) < len(json.dumps(full)) / 2


def test_a_list_then_events():
    cache = PodCache(LABEL_JOB)
    assert cache.resource_version == ""
    cache.replace([pod("a", "Pending", {"waiting": {"reason": "ContainerCreating"}}),
                   pod("b")], "10")
    assert cache.resource_version == "10" and len(cache) == 2
    assert status_of(cache, "a").state is JobState.PENDING
    assert status_of(cache, "b").state is JobState.RUNNING
    assert cache.lookup("c") == (None, False)  # never seen: not known to be gone

    assert cache.apply("MODIFIED", pod("a", rv="11")) is False  # running: no end
    assert status_of(cache, "a").state is JobState.RUNNING and cache.resource_version == "11"
    assert cache.apply("ADDED", pod("c", "Pending", {}, rv="12")) is False
    assert status_of(cache, "c").state is JobState.PENDING
    # an end: the job may end, with its pod's exit
    assert cache.apply("MODIFIED", pod("b", "Failed", terminated(3), rv="13")) is True
    st = status_of(cache, "b")
    assert (st.state, st.exitcode, st.reason) == (JobState.FAILED, 3, "exit code 3")
    assert cache.resource_version == "13"


def test_a_deleted_pod_is_lost_unless_its_last_state_was_an_end():
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a"), pod("b"), pod("c")], "10")
    # deleted by someone while it ran (its last state: Running, being deleted)
    assert cache.apply("DELETED", pod("a", rv="11")) is True
    assert cache.lookup("a")[1] is True
    st = status_of(cache, "a")
    assert st.state is JobState.LOST and "its pod was deleted outside fiber" in st.reason
    # fiber deleted it (terminate): cancelled, by that signal
    assert cache.apply("DELETED", pod("b", rv="12")) is True
    st = status_of(cache, "b", signalled=[signal.SIGTERM])
    assert (st.state, st.exitcode) == (JobState.CANCELLED, -signal.SIGTERM)
    # it had ended before it was deleted: its end, as the pod said it
    cache.apply("MODIFIED", pod("c", "Failed", terminated(137), rv="13"))
    cache.apply("DELETED", pod("c", "Failed", terminated(137), rv="14"))
    st = status_of(cache, "c")
    assert (st.state, st.exitcode) == (JobState.FAILED, -signal.SIGKILL)
    assert len(cache) == 0


def test_bookmarks_move_the_resource_version_only():
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a")], "10")
    assert cache.apply("BOOKMARK", bookmark("25")) is False
    assert cache.resource_version == "25" and len(cache) == 1
    assert cache.lookup("a")[0] == trim(pod("a"))


def test_a_restarted_watch_resumes_from_the_last_version_and_repeats_nothing():
    """The API server ends each watch (its timeout): the next one starts at the version
    of the last event or bookmark; a watch started without one sends every pod as ADDED,
    which changes nothing known."""
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a"), pod("b", "Pending", {})], "10")
    cache.apply("MODIFIED", pod("b", rv="11"))
    cache.apply("BOOKMARK", bookmark("15"))
    assert cache.resource_version == "15"  # where the next watch starts
    before = [cache.lookup(j) for j in "ab"]
    assert cache.apply("ADDED", pod("a", rv="16")) is False
    assert cache.apply("ADDED", pod("b", rv="16")) is False
    assert [cache.lookup(j) for j in "ab"] == before


def test_410_gone_lists_again_and_a_pod_deleted_meanwhile_keeps_its_last_state():
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a"), pod("b"), pod("c", "Pending", {})], "10")
    cache.apply("MODIFIED", pod("b", "Succeeded", terminated(0), rv="11"))
    cache.expire()  # the watch said 410 Gone: its version is too old
    assert cache.resource_version == ""  # the next watch lists first
    assert status_of(cache, "a").state is JobState.RUNNING  # known states stay meanwhile
    # the new list: a and b were deleted while nobody watched, c runs, d is new
    cache.replace([pod("c", rv="40"), pod("d", "Pending", {}, rv="41")], "42")
    assert cache.resource_version == "42"
    assert status_of(cache, "a").state is JobState.LOST  # deleted while it ran
    assert status_of(cache, "b").state is JobState.SUCCEEDED  # it had ended
    assert status_of(cache, "c").state is JobState.RUNNING
    assert status_of(cache, "d").state is JobState.PENDING
    # and a pod the new list has again is no longer gone
    cache.replace([pod("a", rv="50")], "50")
    assert cache.lookup("a") == (trim(pod("a", rv="50")), False)


def test_a_job_whose_end_was_read_is_forgotten_and_its_pods_events_dropped():
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a", "Failed", terminated(1))], "10")
    cache.forget("a")
    assert cache.lookup("a") == (None, False) and len(cache) == 0
    assert cache.apply("MODIFIED", pod("a", "Failed", terminated(1), rv="11")) is False
    assert cache.lookup("a") == (None, False)
    assert cache.apply("DELETED", pod("a", "Failed", terminated(1), rv="12")) is False
    assert cache.lookup("a") == (None, False)
    # its name taken again later (a new pod of that name) is seen again
    cache.apply("ADDED", pod("a", rv="13"))
    assert cache.lookup("a")[0] is not None


def test_deleted_pods_no_job_asks_about_are_kept_up_to_a_bound():
    cache = PodCache(LABEL_JOB, gone_kept=3)
    cache.replace([pod(str(i)) for i in range(5)], "10")
    for i in range(5):
        cache.apply("DELETED", pod(str(i), rv=str(11 + i)))
    assert [cache.lookup(str(i))[1] for i in range(5)] == [False, False, True, True, True]


def test_events_do_not_change_what_a_caller_holds():
    cache = PodCache(LABEL_JOB)
    cache.replace([pod("a")], "10")
    held = cache.lookup("a")[0]
    kept = copy.deepcopy(held)
    cache.apply("MODIFIED", pod("a", "Failed", terminated(2), rv="11"))
    assert held == kept
