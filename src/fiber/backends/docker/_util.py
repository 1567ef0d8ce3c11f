"""The Docker backend's dealings with the engine that are not the backend itself: the
SDK import, client arguments, what an exited container's code and output mean, mounts, the
container this process runs in, and the engine's errors in one line."""

from __future__ import annotations

import re
import signal
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ...config import Config, settings
from .. import _common
from .._base import JobState, JobStatus
from .._common import import_extra, signal_name
from ._settings import DockerSettings

if TYPE_CHECKING:
    import types


def _own(cfg: Optional[Config] = None) -> DockerSettings:
    """The docker backend's settings in ``cfg`` (or the config in force)."""
    return settings(DockerSettings, "docker", cfg)


def docker_sdk() -> types.ModuleType:
    """The ``docker`` package; a clear error naming the extra when it is missing."""
    return import_extra("docker", "docker", "the Docker SDK for Python")


_TINI_SIGNALLED = re.compile(rb"\] Main child exited with signal \(with signal '([^']*)'\)")
_TINI_EXITED = re.compile(rb"\] Main child exited normally \(with status '(\d+)'\)")
_TINI_LINE = re.compile(r"^\[(?:INFO|DEBUG|TRACE) +tini \(\d+\)\] .*\n?", re.MULTILINE)


def exit_status(code: int, oom_killed: bool = False, signalled: Sequence[int] = (),
                error: str = "", memory_mb: Optional[int] = None,
                output: bytes = b"") -> JobStatus:
    """The `JobStatus` of an exited container.

    ``code`` is the container's exit code: tini's, which is ``128 + n`` when the job died of
    signal ``n``. tini says which it was in the container's ``output`` (fiber sets
    ``TINI_VERBOSITY=2``), so a job's own ``sys.exit(137)`` stays 137. Without that line (tini
    itself was killed, by fiber, ``docker kill`` or the OOM killer; or another init), a code
    ``128 + n`` is taken as signal ``n``, as shells do. ``signalled`` are the signals fiber
    sent it, ``error`` the engine's own error text.
    """
    if oom_killed:
        limit = f" (memory limit {memory_mb} MB)" if memory_mb else ""
        return JobStatus(JobState.FAILED, -signal.SIGKILL,
                         f"killed by the kernel's OOM killer: out of memory{limit}")
    exited = _TINI_EXITED.findall(output)
    by_signal = 128 < code <= 128 + 64 and (
        bool(_TINI_SIGNALLED.search(output)) or not exited)
    if by_signal:
        sig = code - 128
        if sig in signalled:
            return JobStatus(JobState.CANCELLED, -sig,
                             f"killed by {signal_name(sig)} (cancelled)")
        return JobStatus(JobState.FAILED, -sig, f"killed by {signal_name(sig)}")
    if code == 0 and not error:
        return JobStatus(JobState.SUCCEEDED, 0)
    reason = f"exit code {code}"
    if error:
        reason += f": {error}"
    return JobStatus(JobState.FAILED, code, reason)


def parse_mounts(text: str) -> List[str]:
    """``docker_mounts`` (``src[:dst][:ro|rw],...``) as the engine's bind strings."""
    return [f"{src}:{dst}:{'ro' if ro else 'rw'}"
            for src, dst, ro in _common.parse_mounts("docker_mounts", text)]


# Docker: <data-root>/containers/<id>/hostname; podman: .../<id>/userdata/hostname
_CONTAINER_ID = re.compile(r"/([0-9a-f]{64})/(?:userdata/)?hostname$")
_CGROUP_ID = re.compile(r"(?:/docker/|/docker-|/libpod-)([0-9a-f]{64})")


def own_container_id() -> Optional[str]:
    """The id of the Docker container this process runs in, or None (not in one).

    The engine bind-mounts ``<data-root>/containers/<id>/hostname`` on ``/etc/hostname``;
    cgroup v1 paths (``/docker/<id>``) are the fallback.
    """
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4] == "/etc/hostname":
                    m = _CONTAINER_ID.search(fields[3])
                    if m:
                        return m.group(1)
    except OSError:
        pass
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            m = _CGROUP_ID.search(f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    return None


def client_kwargs(cfg: Config) -> Tuple[str, Dict[str, object]]:
    """The engine's URL and the Docker SDK client's arguments for it (DOCKER_* variables,
    then ``docker_host``)."""
    kwargs = docker_sdk().utils.kwargs_from_env()
    if _own(cfg).host:
        kwargs["base_url"] = _own(cfg).host
    return str(kwargs.get("base_url") or "unix:///var/run/docker.sock"), kwargs


def without_tini(text: str) -> str:
    """Output less tini's own lines (``[INFO  tini (1)] ...``)."""
    return _TINI_LINE.sub("", text)


# -- engine errors ------------------------------------------------------------------------


def status_code(e: BaseException) -> Optional[int]:
    response = getattr(e, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def is_not_found(e: BaseException) -> bool:
    return status_code(e) == 404


def is_conflict(e: BaseException) -> bool:
    return status_code(e) == 409


def engine_reason(e: BaseException, image: str = "") -> str:
    """What the engine (or the connection to it) said, in one line."""
    explanation = getattr(e, "explanation", None)
    if explanation:
        text = str(explanation)
        if image and is_not_found(e) and "image" in text.lower():
            return (f"image {image!r} is not on the engine (fiber does not pull images: "
                    f"pull or build it there first): {text}")
        return text
    name = type(e).__name__
    if "Timeout" in name:
        return f"the engine did not answer in time ({name}: {e})"
    if "ConnectionError" in name or isinstance(e, ConnectionError):
        return f"cannot connect ({e})"
    return f"{name}: {e}"
