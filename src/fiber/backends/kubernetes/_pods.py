"""The pods the ``kubernetes`` backend asks for, and how it reads their state.

Pure functions on JSON-ready dicts (``v1/Pod``), so that they are tested offline: the
manifests against the schemas of current Kubernetes releases, the state mapping against
every case the cluster reports.
"""

from __future__ import annotations

import json
import re
import signal
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...errors import ConfigError
from .._base import JobSpec, JobState, JobStatus, Resources
from .._common import mount_items, signal_name
from .._job_command import JOB_HOST_ENV

__all__ = ["pod_manifest", "pod_status", "smallest_node_cpus", "parse_claims", "CLAIM_PATH",
           "api_reason", "is_not_found", "CONTAINER", "POD_NAME_ENV", "POD_NAMESPACE_ENV",
           "POD_IP_ENV"]

#: Environment through which a process in a pod knows its pod (the downward API).
POD_NAME_ENV = "FIBER_K8S_POD_NAME"
POD_NAMESPACE_ENV = "FIBER_K8S_NAMESPACE"
POD_IP_ENV = "FIBER_K8S_POD_IP"
#: Where a volume claim is mounted when no path is given (the original fiber's place).
CLAIM_PATH = "/persistent"
#: The name of the job's container in its pod.
CONTAINER = "fiber"
_GRACE_SECONDS = 10  # between SIGTERM and SIGKILL when a pod is deleted
#: Waiting reasons that no amount of waiting fixes: the job fails at once.
_FATAL_WAITING = frozenset({"ErrImageNeverPull", "InvalidImageName", "ErrInvalidImageName",
                            "CreateContainerConfigError", "CreateContainerError",
                            "RunContainerError"})
#: Waiting reasons that may resolve themselves: the job fails after the pending timeout.
_STUCK_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})


def parse_claims(key: str, text: str) -> List[Tuple[str, str, bool]]:
    """A list of volume claims ``claim[:pod_path][:ro|rw],...`` (config key ``key``) as
    ``(claim, pod_path, read_only)`` triples; the pod path defaults to `CLAIM_PATH`.

    Raises:
        ConfigError: an item is not a claim name (a DNS subdomain) with an absolute path.
    """
    out = []
    for item, parts, read_only in mount_items(text):
        if len(parts) == 1:
            parts.append(CLAIM_PATH)
        if (len(parts) != 2 or not parts[1].startswith("/") or len(parts[0]) > 253
                or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", parts[0])):
            raise ConfigError(key, f"expected claim[:pod_path][:ro] (a claim's name, an "
                              f"absolute path), got {item!r}")
        out.append((parts[0], parts[1], read_only))
    return out


def _volumes(mounts: Sequence[Tuple[str, str, bool]],
             claims: Sequence[Tuple[str, str, bool]]) -> Tuple[List[Any], List[Any]]:
    """The pod's ``volumes`` and the container's ``volumeMounts``: hostPath mounts, then
    volume claims."""
    volumes: List[Any] = []
    volume_mounts: List[Any] = []
    for i, (src, dst, read_only) in enumerate(mounts):
        volumes.append({"name": f"fiber-mount-{i}", "hostPath": {"path": src}})
        volume_mounts.append({"name": f"fiber-mount-{i}", "mountPath": dst,
                              "readOnly": read_only})
    for i, (claim, dst, read_only) in enumerate(claims):
        volumes.append({"name": f"fiber-claim-{i}", "persistentVolumeClaim": {
            "claimName": claim, "readOnly": read_only}})
        volume_mounts.append({"name": f"fiber-claim-{i}", "mountPath": dst,
                              "readOnly": read_only})
    return volumes, volume_mounts


def smallest_node_cpus(nodes: Sequence[Dict[str, Any]]) -> Optional[int]:
    """The whole CPUs a pod may ask for on the smallest schedulable node of ``nodes`` (a
    node list's items, JSON: ``status.allocatable.cpu`` is ``"2"`` or ``"1930m"``): one
    less than its allocatable, for the node's own pods (a DaemonSet's requests: a pod
    that asks for all of it would never be placed); None if none says."""
    found = []
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        text = str(((node.get("status") or {}).get("allocatable") or {}).get("cpu", ""))
        try:
            found.append(float(text[:-1]) / 1000 if text.endswith("m") else float(text))
        except ValueError:
            continue
    return max(1, int(min(found)) - 1) if found else None


def _quantity_cpu(cpu: float) -> str:
    millis = max(1, int(round(cpu * 1000)))
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def pod_manifest(spec: JobSpec, *, name: str, namespace: str, image: str,
                 command: Sequence[str], labels: Dict[str, str],
                 annotations: Dict[str, str], env: Dict[str, str],
                 owner: Optional[Dict[str, str]] = None, service_account: str = "",
                 pull_policy: str = "", cpu_limits: bool = True,
                 mounts: Sequence[Tuple[str, str, bool]] = (),
                 active_deadline: int = 0,
                 claims: Sequence[Tuple[str, str, bool]] = ()) -> Dict[str, Any]:
    """The pod (a JSON-ready dict, ``v1/Pod``) that runs one job; ``active_deadline``:
    its ``activeDeadlineSeconds`` (0: none); ``mounts``: hostPath volumes and ``claims``:
    PersistentVolumeClaims, as ``(source, pod_path, read_only)``."""
    res: Resources = spec.resources
    requests: Dict[str, str] = {}
    limits: Dict[str, str] = {}
    if res.cpu:
        requests["cpu"] = _quantity_cpu(res.cpu)
        if cpu_limits:
            limits["cpu"] = requests["cpu"]
    if res.memory_mb:
        requests["memory"] = limits["memory"] = f"{int(res.memory_mb)}Mi"
    if res.gpu:
        limits["nvidia.com/gpu"] = str(int(res.gpu))
    container: Dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": list(command),
        "env": [{"name": k, "value": v} for k, v in env.items()] + [
            {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": POD_NAMESPACE_ENV,
             "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            # shown as the job's host: its node, not its pod's name (its host name)
            {"name": JOB_HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
    }
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests),
                                                     ("limits", limits)) if v}
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    pod_spec: Dict[str, Any] = {
        "restartPolicy": "Never",
        "shareProcessNamespace": True,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": _GRACE_SECONDS,
        "containers": [container],
    }
    if spec.avoid_hosts:  # a pool's suspected nodes: preferred, so best effort
        pod_spec["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                      "values": sorted(spec.avoid_hosts)}]}}]}}
    if active_deadline:
        pod_spec["activeDeadlineSeconds"] = int(active_deadline)
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if mounts or claims:
        volumes, volume_mounts = _volumes(mounts, claims)
        pod_spec["volumes"] = volumes
        container["volumeMounts"] = volume_mounts
    metadata: Dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels,
                                "annotations": annotations}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod",
                                        "name": owner["name"], "uid": owner["uid"]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _terminated_status(term: Dict[str, Any], signalled: Sequence[int],
                       memory_mb: Optional[int]) -> JobStatus:
    code = int(term.get("exitCode") or 0)
    reason = str(term.get("reason") or "")
    if reason == "OOMKilled":
        limit = f" (memory limit {memory_mb} MB)" if memory_mb else ""
        return JobStatus(JobState.FAILED, -signal.SIGKILL,
                         f"killed by the kernel's OOM killer: out of memory{limit}")
    sig = int(term.get("signal") or 0)
    if not sig and 128 < code <= 128 + 64:
        sig = code - 128
    if sig:
        if sig in signalled:
            return JobStatus(JobState.CANCELLED, -sig, f"killed by {signal_name(sig)} "
                             "(cancelled)")
        return JobStatus(JobState.FAILED, -sig, f"killed by {signal_name(sig)}")
    if code == 0:
        return JobStatus(JobState.SUCCEEDED, 0)
    message = str(term.get("message") or "").strip()
    return JobStatus(JobState.FAILED, code,
                     f"exit code {code}" + (f": {message}" if message else ""))


def pod_status(pod: Optional[Dict[str, Any]], *, signalled: Sequence[int] = (),
               memory_mb: Optional[int] = None, blocked_for: float = 0.0,
               pending_timeout: float = 60.0) -> Tuple[JobStatus, str]:
    """The job status of a pod (its JSON, None when it no longer exists), and why it is
    blocked ('' when it is not): a pending pod whose reason needs a person.

    ``blocked_for`` is how long that reason has been seen; past ``pending_timeout`` (when
    not 0) the job fails with it.
    """
    if pod is None:
        if signalled:
            sig = signalled[-1]
            return JobStatus(JobState.CANCELLED, -sig, f"pod deleted ({signal_name(sig)}, "
                             "cancelled)"), ""
        return JobStatus(JobState.LOST, None, "its pod was deleted outside fiber"), ""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    containers = status.get("containerStatuses") or []
    state = (containers[0].get("state") or {}) if containers else {}
    terminated = state.get("terminated")
    if terminated:  # restartPolicy Never: a terminated container is the job's end
        return _terminated_status(terminated, signalled, memory_mb), ""
    if phase in ("Succeeded", "Failed"):  # ended without a container state (evicted, ...)
        why = ": ".join(str(x) for x in (status.get("reason"), status.get("message")) if x)
        if phase == "Succeeded":
            return JobStatus(JobState.SUCCEEDED, 0), ""
        if signalled:
            return JobStatus(JobState.CANCELLED, -signalled[-1], why or "cancelled"), ""
        return JobStatus(JobState.FAILED, None, f"pod failed: {why or 'no reason given'}"), ""
    if phase == "Unknown":
        return JobStatus(JobState.LOST, None, "the pod's node lost contact with the "
                         "cluster: " + str(status.get("message") or "phase Unknown")), ""
    if phase == "Running":
        return JobStatus(JobState.RUNNING), ""
    if signalled and (pod.get("metadata") or {}).get("deletionTimestamp"):
        # cancelled before its container ran: it never will run the job (a kubelet may take
        # a minute to tear down a pod deleted while it was being created)
        return JobStatus(JobState.CANCELLED, -signalled[-1], "cancelled before it started"), ""
    # Pending: is it waiting on something that needs a person?
    waiting = state.get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    message = str(waiting.get("message") or "").strip()
    image = containers[0].get("image", "") if containers else ""
    if image and image not in message:  # the runtime's message may not name it
        message = f"image {image}: {message}" if message else f"image {image}"
    if reason in _FATAL_WAITING:
        return JobStatus(JobState.FAILED, None, f"{reason}: {message}"), ""
    blocked = ""
    if reason in _STUCK_WAITING:
        blocked = f"{reason}: {message}"
    for cond in status.get("conditions") or []:
        if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"):
            blocked = f"unschedulable: {cond.get('message') or 'no node fits the pod'}"
    if blocked and pending_timeout and blocked_for >= pending_timeout:
        return JobStatus(JobState.FAILED, None,
                         f"{blocked} (pending for {blocked_for:.0f} s)"), blocked
    return JobStatus(JobState.PENDING), blocked


def api_reason(e: BaseException) -> str:
    """What the API server (or the connection to it) said, in one line."""
    body = getattr(e, "body", None)
    status = getattr(e, "status", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return f"{message} (HTTP {status})"
    if status:
        return f"HTTP {status} {getattr(e, 'reason', '')}".strip()
    name = type(e).__name__
    text = str(e)
    if "MaxRetryError" in name or "NewConnectionError" in text or "ConnectTimeout" in text:
        return f"cannot connect to the API server ({text})"
    return f"{name}: {text}"


def is_not_found(e: BaseException) -> bool:
    return getattr(e, "status", None) == 404
