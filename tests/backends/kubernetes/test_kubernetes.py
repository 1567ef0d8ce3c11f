"""The ``kubernetes`` backend: its pods, checked offline against current Kubernetes schemas,
and its behaviour on a real Kubernetes node.

The node tests need a cluster at ``KUBECONFIG`` on which the image ``FIBER_IMAGE`` (default
``fiber-test:latest``) is present and the settings of ``scripts/k8s-node.sh test-env`` hold
(namespace ``fiber-test`` with deploy/rbac.yaml applied, this directory mounted into pods).
``scripts/test`` starts a one-node cluster with ``scripts/k8s-node.sh``; by hand::

    scripts/k8s-node.sh build && scripts/k8s-node.sh start
    eval "$(scripts/k8s-node.sh test-env)" && pytest tests/backends/kubernetes

Without a usable cluster the node tests are skipped, except under ``CI=true``, where they
fail. The offline tests (manifests, status mapping) always run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
from typing import Any, Dict, Iterator, List, Tuple
from urllib.parse import urlsplit

import pytest
import yaml

import fiber
from fiber._version import install_hint
from fiber.backends import JobHandle, JobSpec, JobState, JobStatus, Resources, get_backend
from fiber.backends.kubernetes import (
    LABEL_JOB,
    LABEL_PROGRAM,
    KubernetesBackend,
    parse_claims,
    pod_manifest,
    pod_status,
)
from fiber.backends.kubernetes._pods import POD_IP_ENV
from fiber.errors import BackendError, ConfigError, SubmitError
from fiber.testing.conformance.support import observe_helpers
from fiber.testing.conformance.support.lost_warnings import (
    LostWarnings,
    check_an_oom_killed_worker_is_one_warning,
)
from fiber.testing.conformance.support.waiting import unusable, wait_until

import support
from support.cli_helpers import (
    MAIN,
    fiber_cli,
    fiber_popen,
    ready_and_listed,
    started_job,
    stop_program,
    tagged,
)
from support.retire_helpers import check_a_stopped_worker_retires, mark_then_sleep, starts
from support.tcp_proxy import TcpProxy

IMAGE = os.environ.get("FIBER_IMAGE") or "fiber-test:latest"
NODE = "the Kubernetes test node"  # what tests/conftest.unusable names
NAMESPACE = os.environ.get("FIBER_KUBERNETES_NAMESPACE") or "fiber-test"
TESTS = support.TESTS  # mounted into the pods: their jobs import this module
REPO = support.REPO
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


# -- targets (run in pods: this module is imported there through the mount) -------------


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def exit_with(code: int) -> None:
    sys.exit(code)


def chatty(text: str) -> None:
    print(text, flush=True)


def slow_square(x: int) -> int:
    time.sleep(0.05)
    return x * x


@fiber.meta(cpu=64)
def too_big() -> None:
    pass


# -- offline: the pods we ask for -------------------------------------------------------


def _manifest(**kw: Any) -> Dict[str, Any]:
    spec = JobSpec(command=("python3", "-m", "fiber.process._bootstrap"), env={"A": "1"},
                   resources=kw.pop("resources", Resources(cpu=0.5, memory_mb=256, gpu=1)),
                   image="img:1", name="PoolWorker-1",
                   avoid_hosts=kw.pop("avoid_hosts", frozenset()))
    args: Dict[str, Any] = dict(name="fiber-abc-1", namespace="ns", image="img:1",
                                command=list(spec.command),
                                labels={LABEL_PROGRAM: "abc", LABEL_JOB: "fiber-abc-1"},
                                annotations={"fiber.name": spec.name},
                                env={"A": "1"}, owner={"name": "master", "uid": "u-1"},
                                service_account="fiber", pull_policy="IfNotPresent",
                                mounts=[("/data", "/data", True)])
    args.update(kw)
    return pod_manifest(spec, **args)


def test_pod_manifest():
    pod = _manifest()
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert spec["restartPolicy"] == "Never" and spec["shareProcessNamespace"] is True
    assert spec["serviceAccountName"] == "fiber"
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi",
                                         "nvidia.com/gpu": "1"}}
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "master", "uid": "u-1"}]
    env = {e["name"]: e for e in c["env"]}
    assert env["A"]["value"] == "1"
    assert env["FIBER_K8S_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["FIBER_K8S_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["FIBER_JOB_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert c["volumeMounts"] == [{"name": "fiber-mount-0", "mountPath": "/data",
                                  "readOnly": True}]
    assert spec["volumes"] == [{"name": "fiber-mount-0", "hostPath": {"path": "/data"}}]
    no_limits = _manifest(cpu_limits=False, resources=Resources(cpu=2))["spec"]["containers"][0]
    assert no_limits["resources"] == {"requests": {"cpu": "2"}}
    bare = _manifest(owner=None, service_account="", mounts=(), pull_policy="",
                     resources=Resources())
    assert "ownerReferences" not in bare["metadata"] and "volumes" not in bare["spec"]
    assert "resources" not in bare["spec"]["containers"][0]
    assert "activeDeadlineSeconds" not in bare["spec"]
    assert _manifest(active_deadline=45)["spec"]["activeDeadlineSeconds"] == 45


def test_volume_claims_are_mounted_where_the_original_fiber_mounted_them():
    """``fiber run -v CLAIM`` (kubernetes_volume_claims): the claim at ``/persistent``,
    read-write, as the original's ``fiber run -v``; a path and ``ro`` when given."""
    claims = parse_claims("kubernetes_volume_claims", "data, logs.v1:/logs:ro")
    assert claims == [("data", "/persistent", False), ("logs.v1", "/logs", True)]
    spec = _manifest(claims=claims)["spec"]
    assert spec["volumes"][1:] == [
        {"name": "fiber-claim-0", "persistentVolumeClaim": {"claimName": "data",
                                                            "readOnly": False}},
        {"name": "fiber-claim-1", "persistentVolumeClaim": {"claimName": "logs.v1",
                                                            "readOnly": True}}]
    assert spec["containers"][0]["volumeMounts"][1:] == [
        {"name": "fiber-claim-0", "mountPath": "/persistent", "readOnly": False},
        {"name": "fiber-claim-1", "mountPath": "/logs", "readOnly": True}]
    only = _manifest(mounts=(), claims=claims[:1])["spec"]
    assert [v["name"] for v in only["volumes"]] == ["fiber-claim-0"]
    for bad in ("Data", "data:relative", "a:/b:/c", "-data"):
        with pytest.raises(ConfigError, match="claim"):
            parse_claims("kubernetes_volume_claims", bad)


def _validate_all(docs: List[Dict[str, Any]]) -> None:
    import kubernetes_validate
    from kubernetes_validate import utils

    versions = sorted({"1.25.0", utils.latest_version()})
    assert len(versions) == 2, versions
    for version in versions:
        for doc in docs:
            # raises ValidationError (with the path of the bad field) on any schema error
            kubernetes_validate.validate(doc, version, strict=True)


def test_pod_manifests_valid_for_current_kubernetes_releases():
    """Every kind of pod the backend makes, against the schemas of 1.25 and the newest."""
    _validate_all([
        _manifest(),
        _manifest(cpu_limits=False, active_deadline=3600),
        _manifest(claims=[("data", "/persistent", False), ("logs", "/logs", True)]),
        _manifest(owner=None, service_account="", mounts=(), pull_policy="",
                  resources=Resources()),
        _manifest(avoid_hosts=frozenset({"node-2", "node-1"})),
    ])


def test_a_pod_prefers_nodes_other_than_a_pool_s_suspected_ones():
    """``JobSpec.avoid_hosts`` (a pool's silent hosts, issue 45): a preferred node
    anti-affinity, so that the pod still runs where it can if no other node may take it;
    none when there is nothing to avoid."""
    affinity = _manifest(avoid_hosts=frozenset({"node-2", "node-1"}))["spec"]["affinity"]
    assert affinity == {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn",
             "values": ["node-1", "node-2"]}]}}]}}
    assert "affinity" not in _manifest()["spec"]


def test_rbac_manifest_valid_and_least_privilege():
    with open(os.path.join(REPO, "deploy", "rbac.yaml"), encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    _validate_all(docs)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {("pods",): ["create", "delete", "get", "list", "watch"],
                     ("pods/log",): ["get"]}
    assert not [d for d in docs if d["kind"].startswith("Cluster")]


def _pod(phase: str, state: Dict[str, Any], conditions: Any = (),
         **status: Any) -> Dict[str, Any]:
    return {"status": {"phase": phase, "conditions": list(conditions),
                       "containerStatuses": [{"image": "img:1", "state": state}], **status}}


@pytest.mark.parametrize("pod,kw,state,code,reason", [
    (None, {}, "lost", None, "deleted outside fiber"),
    (None, {"signalled": [signal.SIGTERM]}, "cancelled", -15, "SIGTERM"),
    (_pod("Running", {"running": {}}), {}, "running", None, ""),
    (_pod("Succeeded", {"terminated": {"exitCode": 0}}), {}, "succeeded", 0, ""),
    (_pod("Failed", {"terminated": {"exitCode": 3}}), {}, "failed", 3, "exit code 3"),
    (_pod("Failed", {"terminated": {"exitCode": 137}}), {}, "failed", -9, "SIGKILL"),
    (_pod("Failed", {"terminated": {"exitCode": 143}}), {"signalled": [15]}, "cancelled",
     -15, "cancelled"),
    (_pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},),
     {"memory_mb": 96}, "failed", -9, "OOM killer: out of memory (memory limit 96 MB)"),
    (_pod("Pending", {"waiting": {"reason": "ErrImageNeverPull", "message": "no img:1"}}),
     {}, "failed", None, "ErrImageNeverPull: no img:1"),
    (_pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}),
     {"blocked_for": 5, "pending_timeout": 10}, "pending", None, ""),
    (_pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}),
     {"blocked_for": 10, "pending_timeout": 10}, "failed", None,
     "ImagePullBackOff: image img:1: back-off"),
    (_pod("Pending", {}, [{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "1 Insufficient cpu."}]),
     {"blocked_for": 99, "pending_timeout": 10}, "failed", None, "unschedulable: 1 Insuff"),
    (_pod("Pending", {}, [{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "1 Insufficient cpu."}]),
     {"blocked_for": 1e6, "pending_timeout": 0}, "pending", None, ""),
    (_pod("Failed", {}, reason="Evicted", message="low on memory"), {}, "failed", None,
     "Evicted: low on memory"),
    (_pod("Unknown", {}), {}, "lost", None, "lost contact"),
])
def test_pod_status(pod, kw, state, code, reason):
    st, _ = pod_status(pod, **kw)
    assert st.state.value == state and st.exitcode == code
    assert reason in st.reason, st.reason


def test_pod_status_names_what_blocks_a_pending_pod():
    pod = _pod("Pending", {}, [{"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": "0/1 nodes"}])
    st, blocked = pod_status(pod, blocked_for=0, pending_timeout=10)
    assert st.state.value == "pending" and blocked == "unschedulable: 0/1 nodes"


def test_missing_client_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with fiber.config.override(backend="kubernetes"):
        with pytest.raises(SubmitError, match=re.escape(install_hint("kubernetes"))):
            KubernetesBackend().submit([JobSpec(command=("true",))])


def test_bad_pull_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="kubernetes_image_pull_policy"):
        with fiber.config.override(kubernetes_image_pull_policy="Sometimes"):
            pass


def test_unreachable_api_server_is_a_clear_error(tmp_path):
    """A kubeconfig naming a port where nothing listens: SubmitError, at once."""
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    with fiber.config.override(backend="kubernetes", kubernetes_kubeconfig=str(cfg),
                               kubernetes_timeout=5):
        t0 = time.monotonic()
        with pytest.raises(SubmitError, match="cannot create pod .*cannot connect|refused"):
            KubernetesBackend().submit([JobSpec(command=("true",), image=IMAGE)])
        assert time.monotonic() - t0 < 15


def test_an_api_server_name_that_does_not_resolve_is_said_so(tmp_path, monkeypatch):
    """Not a question of listen_host: the kubeconfig's server is the name to check."""
    monkeypatch.delenv(POD_IP_ENV, raising=False)
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://nosuchhost.invalid:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    with fiber.config.override(kubernetes_kubeconfig=str(cfg)):
        with pytest.raises(BackendError) as info:
            KubernetesBackend().listen_host()
    said = str(info.value)
    assert said.startswith("the Kubernetes API server 'nosuchhost.invalid' does not resolve "
                           "(Name or service not known): check the server of your kubeconfig"
                           ), said
    assert "set listen_host" not in said


def test_no_credentials_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with fiber.config.override(backend="kubernetes"):
        with pytest.raises(SubmitError, match="cannot find credentials"):
            KubernetesBackend().submit([JobSpec(command=("true",))])


# -- on the node ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api() -> Iterator[Any]:
    """A client of the test cluster (the one the backend uses: KUBECONFIG)."""
    try:
        import kubernetes
    except ImportError:
        unusable(NODE, "the Kubernetes client is not installed (pip install kubernetes)")
    try:
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        core = kubernetes.client.CoreV1Api()
        core.read_namespace(NAMESPACE, _request_timeout=10)
    except Exception as e:
        unusable(NODE, f"no usable cluster at KUBECONFIG={os.environ.get('KUBECONFIG')} with "
                  f"namespace {NAMESPACE} (scripts/k8s-node.sh start && eval "
                  f"\"$(scripts/k8s-node.sh test-env)\"): {e}")
    yield core


@pytest.fixture(autouse=True)
def k8s_config(request: pytest.FixtureRequest) -> Iterator[None]:
    """Node tests run with the test-env settings; afterwards no pod of the program runs."""
    if "api" not in request.fixturenames:
        yield
        return
    core = request.getfixturevalue("api")
    with fiber.config.override(backend="kubernetes", image=IMAGE, kubernetes_namespace=NAMESPACE,
                               kubernetes_pending_timeout=60):
        yield
    program = backend().program

    def none_running() -> bool:
        pods = pods_of(core, program)
        return not [p for p in pods if p.status.phase in ("Pending", "Running")]

    wait_until(none_running, 60, interval=0.5, message="pods of this program still running")


def test_the_backend_knows_the_size_of_the_nodes(api):
    """The CPUs a pool's pod fits workers to (issue 45, fiber.pool._sizing): one below the
    node's allocatable CPUs (left to its own pods), as the API tells them to anyone who
    may list nodes."""
    allocatable = [node.status.allocatable["cpu"] for node in api.list_node().items]
    whole = [int(float(c[:-1]) / 1000) if c.endswith("m") else int(float(c))
             for c in allocatable]
    assert backend().node_cpus() == max(1, min(whole) - 1), allocatable  # one for the node


@pytest.fixture
def warnings(capfd: Any, caplog: Any) -> LostWarnings:
    """The lost-worker warnings of this test's pools."""
    return LostWarnings(capfd, caplog)


def backend() -> KubernetesBackend:
    b = get_backend("kubernetes")
    assert isinstance(b, KubernetesBackend)
    return b


def kctx() -> Any:
    return fiber.get_context("kubernetes")


def pods_of(core: Any, program: str) -> List[Any]:
    return list(core.list_namespaced_pod(NAMESPACE,
                                         label_selector=f"{LABEL_PROGRAM}={program}").items)


def test_exit_codes_and_the_pod_is_deleted_after(api):
    for code in (0, 3):
        p = kctx().Process(target=exit_with, args=(code,), name=f"exits-{code}")
        p.start()
        job_id = p._job.handle.job_id
        pod = api.read_namespaced_pod(job_id, NAMESPACE)
        assert pod.metadata.namespace == NAMESPACE != "default"
        assert pod.metadata.labels[LABEL_JOB] == job_id
        assert pod.metadata.annotations["fiber.name"] == f"exits-{code}"
        assert pod.spec.restart_policy == "Never"
        p.join(120)
        assert p.exitcode == code
    wait_until(lambda: not pods_of(api, backend().program), 60, interval=0.5,
               message="ended pods are deleted")


def test_terminate_and_kill(api):
    for method, sig in (("terminate", signal.SIGTERM), ("kill", signal.SIGKILL)):
        p = kctx().Process(target=sleep, args=(120,))
        p.start()
        wait_until(p.is_alive, 120, message="pod running")
        time.sleep(0.5)
        t0 = time.monotonic()
        getattr(p, method)()
        p.join(60)
        assert p.exitcode == -sig
        assert time.monotonic() - t0 < 30


def test_logs(api):
    p = kctx().Process(target=chatty, args=("hello from a pod",))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    # the child reported its exit; the cluster's view of its pod may lag: once the backend
    # has seen the pod end, its output is kept (the pod itself is deleted)
    st = backend().wait(p._job.handle, 60)
    assert st is not None and st.state.value == "succeeded", st
    assert "hello from a pod" in backend().logs(p._job.handle)
    job_id = p._job.handle.job_id
    wait_until(lambda: job_id not in {q.metadata.name for q in pods_of(api, backend().program)},
               60, interval=0.5, message="the ended pod deleted")
    # fiber logs' path (by job id) too: the pod is gone, its output is not
    assert "hello from a pod" in backend().read_logs(job_id)


def test_pool_over_pods_survives_a_force_deleted_worker_pod(api, caplog):
    """A pod deleted with no grace period (the API's force deletion): the kubelet still
    sends its first process SIGTERM, and SIGKILL within a second or two. Every result
    comes once, and one line names the pod's job and what happened to it: the worker
    retires (INFO, no task charged) when it told the master before the SIGKILL, as on a
    quiet machine; else it was lost (WARNING: "its pod was deleted outside fiber", its
    task resubmitted), as in a loaded CI run, where the worker's question to the master
    (a connection of its own, then a round trip) took longer than the kubelet waited.
    (A worker that gets no SIGTERM at all is lost: the OOM test below.)"""
    with fiber.config.override(log_level="info"), kctx().Pool(3) as pool:
        result = pool.map_async(slow_square, range(200), chunksize=1)
        running: List[Any] = []

        def some_running() -> bool:  # a loaded node may take a while to run the pods
            running[:] = [p for p in pods_of(api, backend().program)
                          if p.status.phase == "Running"]
            return bool(running)

        wait_until(some_running, 180, interval=0.5, message="a running worker pod")
        time.sleep(2)
        victim = running[0]
        api.delete_namespaced_pod(victim.metadata.name, NAMESPACE, grace_period_seconds=0)
        assert result.get(300) == [x * x for x in range(200)]
        retried = pool.status().retried
    said = [r for r in caplog.records if r.name == "fiber" and r.levelname != "DEBUG"]
    # a task slowed by the loaded node, or held by the worker whose pod goes, is copied
    # to another worker once late (pool/_late.py): an INFO line each, not about the pod
    late = [r for r in said if r.levelname == "INFO" and " is late on " in r.getMessage()]
    said = [r for r in said if r not in late]
    assert len(said) == 1, [r.getMessage() for r in said + late]
    line = said[0].getMessage()
    # its node, not its pod's name (the job id)
    assert f"(job {victim.metadata.name} on {victim.spec.node_name})" in line, line
    if said[0].levelname == "INFO":
        assert " retires: " in line and retried == 0, line
    else:
        assert said[0].levelname == "WARNING" and " was lost: " in line, line
        assert "its pod was deleted outside fiber" in line and "resubmitted" in line, line
    print(f"{said[0].levelname}: {line}")


def test_a_worker_pod_deleted_with_a_grace_period_retires_and_no_task_pays(api, tmp_path,
                                                                             caplog):
    """A pod deleted with a grace period (a drain, an eviction: SIGTERM to the pod's first
    process, the job's relay, which passes it on; SIGKILL after 20 s): the worker retires
    (issue 29)."""
    with fiber.config.override(log_level="info"):
        check_a_stopped_worker_retires(
            kctx(), str(tmp_path),
            lambda w: api.delete_namespaced_pod(w.job_id, NAMESPACE, grace_period_seconds=20),
            lambda: caplog.records)


def test_a_map_longer_than_the_active_deadline_runs_at_full_width_and_exact(api, tmp_path,
                                                                            caplog):
    """Issue 29: pods of ``activeDeadlineSeconds`` 60 (kubernetes_active_deadline), a map
    of 24 tasks of 5 s on Pool(2) (60 s of work a worker): workers are renewed before the
    deadline (or retire on the kubelet's SIGTERM at it); every result once, no task
    started twice, no retry counted, no WARNING (a lost worker's log is shown)."""
    marks = str(tmp_path)
    os.chmod(marks, 0o777)
    with fiber.config.override(kubernetes_active_deadline=60, log_level="info"):
        assert backend().job_time_limit() == 60.0
        with kctx().Pool(2) as pool:
            got = pool.starmap(mark_then_sleep, [(x, marks, 5) for x in range(24)],
                               chunksize=1)
            status = pool.status()
    assert got == list(range(24))
    runs = starts(marks)
    assert sorted(runs) == list(range(24))
    assert all(len(r) == 1 for r in runs.values()), runs
    assert status.retried == 0
    said = [r for r in caplog.records if r.name == "fiber"]
    lost = [re.search(r"\(job (\S+) on", r.getMessage()) for r in said if r.levelname == "WARNING"]
    assert not lost, [backend().read_logs(m.group(1)) for m in lost if m]
    assert len([r for r in said if " is renewed " in r.getMessage()
                or " retires: " in r.getMessage()]) >= 2, [r.getMessage() for r in said]


def test_a_pool_worker_the_oom_killer_ended_is_one_warning_saying_so(api, warnings):
    check_an_oom_killed_worker_is_one_warning(kctx(), warnings)


@pytest.mark.parametrize("policy,reason", [("Never", "ErrImageNeverPull"),
                                           ("IfNotPresent", "ErrImagePull|ImagePullBackOff")])
def test_bad_image_is_a_clear_error(api, policy, reason, capfd):
    with fiber.config.override(image="fiber-no-such-image:1", kubernetes_image_pull_policy=policy,
                               kubernetes_pending_timeout=3):
        p = kctx().Process(target=sleep, args=(1,))
        p.start()
        p.join(120)
    assert p.exitcode == 1
    st = p._job.status
    assert st.state.value == "failed"
    assert re.search(reason, st.reason), st.reason
    assert "fiber-no-such-image:1" in st.reason or "fiber-no-such-image" in capfd.readouterr().err


def test_unschedulable_request_is_a_clear_error(api, capfd):
    with fiber.config.override(kubernetes_pending_timeout=3):
        p = kctx().Process(target=too_big)
        p.start()
        p.join(120)
    assert p.exitcode == 1
    assert "unschedulable" in p._job.status.reason and "Insufficient cpu" in p._job.status.reason
    assert "Insufficient cpu" in capfd.readouterr().err  # told to the user, not only logged


def test_bad_image_breaks_a_pool_with_the_reason(api):
    with fiber.config.override(image="fiber-no-such-image:1", kubernetes_image_pull_policy="Never"):
        with kctx().Pool(2) as pool:
            with pytest.raises(fiber.errors.BrokenPoolError, match="ErrImageNeverPull"):
                pool.apply(slow_square, (3,))


def test_oom_killed_job(api, capfd):
    with fiber.config.override(kubernetes_cpu_limits=True):
        p = kctx().Process(target=observe_helpers.hog)
        p.start()
        p.join(120)
    assert p.exitcode == -signal.SIGKILL
    assert "OOM" in p._job.status.reason
    # its line before the end, relayed by its first process (the OOM killer took the job)
    out = capfd.readouterr().out
    assert re.search(rf"^\({re.escape(p.name)}@\S+\) hogging memory now$", out, re.M), out


# -- status: one list, then a watch ----------------------------------------------------------


@pytest.fixture
def proxied(api: Any, tmp_path: Any) -> Iterator[Tuple[TcpProxy, str]]:
    """A relay to the API server that counts the bytes it passes and can cut them off
    (its certificate names 127.0.0.1), and a kubeconfig that goes through it."""
    with open(os.environ["KUBECONFIG"], encoding="utf-8") as f:
        conf = yaml.safe_load(f)
    server = urlsplit(conf["clusters"][0]["cluster"]["server"])
    proxy = TcpProxy(server.hostname or "", server.port or 443)
    conf["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(conf))
    try:
        yield proxy, str(path)
    finally:
        proxy.close()


@pytest.fixture
def own_backend(api: Any) -> Iterator[List[KubernetesBackend]]:
    """Backends of the test's own (its own program ids, its own watch), whose pods are
    deleted and which are closed afterwards."""
    made: List[KubernetesBackend] = []
    yield made
    for b in made:
        b.close()
        b.detach()  # nothing left to remove at exit
        for p in pods_of(api, b.program):
            api.delete_namespaced_pod(p.metadata.name, NAMESPACE, grace_period_seconds=0)


def _state(b: KubernetesBackend, handle: JobHandle) -> JobState:
    return b.status([handle])[handle.job_id].state


def test_polls_read_the_watch_and_it_sees_a_pod_killed_or_deleted(api, proxied, own_backend,
                                                                  tmp_path):
    """Status polls cost the API server nothing once the watch runs (fewer bytes for 50
    polls than for one list of the pods); a pod whose process was killed and a pod
    deleted by someone else end their jobs as they ended, seen through the watch."""
    proxy, kubeconfig = proxied
    go = tmp_path / "go"  # tmp_path is mounted into the pods
    os.chmod(tmp_path, 0o777)
    with fiber.config.override(kubernetes_kubeconfig=kubeconfig):
        b = KubernetesBackend()
        own_backend.append(b)
        sleeper, killed = b.submit([
            JobSpec(command=("sleep", "300"), image=IMAGE, name="sleeper"),
            JobSpec(command=("python3", "-c", "import os, pathlib, signal, time\n"
                             f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.1)\n"
                             "os.kill(os.getpid(), signal.SIGKILL)"), image=IMAGE,
                    name="killed")])
        wait_until(lambda: {_state(b, sleeper), _state(b, killed)} == {JobState.RUNNING},
                   120, interval=0.2, message="both pods running")
        received = proxy.counts()[0]
        assert len(b.find_jobs(b.program)) == 2  # one list of the two pods, for scale
        one_list = proxy.counts()[0] - received
        received = proxy.counts()[0]
        for _ in range(50):
            assert set(b.status([sleeper, killed]).values()) == {JobStatus(JobState.RUNNING)}
        polls = proxy.counts()[0] - received
        assert polls < one_list, (polls, one_list)
        print(f"one list of 2 pods: {one_list} B; 50 polls: {polls} B")

        go.write_text("")
        st = b.wait(killed, 120)
        assert st is not None and (st.state, st.exitcode) == (JobState.FAILED, -9), st
        assert st.reason == "killed by SIGKILL", st
        api.delete_namespaced_pod(sleeper.job_id, NAMESPACE, grace_period_seconds=0)
        st = b.wait(sleeper, 120)
        assert st is not None and st.state is JobState.LOST, st
        assert st.reason == "its pod was deleted outside fiber", st


def test_the_watch_resumes_when_its_connection_is_cut(api, proxied, own_backend, caplog):
    """Every connection to the API server cut, new ones refused: the states known stand
    (a running pod is not called lost), and past kubernetes_timeout a poll says the
    watch is down; once the API server can be reached again, the watch resumes and a pod
    deleted while it was cut off ends its job."""
    proxy, kubeconfig = proxied
    # the client's "Retrying" warnings carry their errors, whose tracebacks hold the cut
    # connections: captured, they would outlive the test
    caplog.set_level(logging.ERROR, logger="urllib3")
    with fiber.config.override(kubernetes_kubeconfig=kubeconfig, kubernetes_timeout=5):
        b = KubernetesBackend()
        own_backend.append(b)
        gone, stays = b.submit([JobSpec(command=("sleep", "300"), image=IMAGE,
                                        name=f"sleeper-{i}") for i in range(2)])
        wait_until(lambda: {_state(b, gone), _state(b, stays)} == {JobState.RUNNING},
                   120, interval=0.2, message="both pods running")
        connections = proxy.counts()[2]
        proxy.cut()
        api.delete_namespaced_pod(gone.job_id, NAMESPACE, grace_period_seconds=0)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            assert {_state(b, gone), _state(b, stays)} == {JobState.RUNNING}
            time.sleep(0.1)

        def down() -> bool:
            try:
                b.status([stays])
            except BackendError as e:
                assert f"cannot watch pods in '{NAMESPACE}': " in str(e), e
                return True
            return False

        wait_until(down, 30, interval=0.2, message="polls say the watch is down")
        proxy.allow()
        got: List[Any] = []

        def ended() -> bool:
            try:
                got[:] = [b.status([gone])[gone.job_id]]
            except BackendError:  # until the watch is back
                return False
            return got[0].state.finished

        wait_until(ended, 60, interval=0.2, message="the deletion seen")
        assert got[0].state is JobState.LOST, got
        assert _state(b, stays) is JobState.RUNNING
        assert proxy.counts()[2] > connections  # through a connection of its own again


def _master_pod(name: str, workers: int) -> Dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k in (
        "FIBER_KUBERNETES_POD_API_SERVER", "FIBER_KUBERNETES_IMAGE_PULL_POLICY",
        "FIBER_CPU_PER_JOB", "FIBER_KUBERNETES_CPU_LIMITS", "FIBER_KUBERNETES_MOUNTS")}
    env["FIBER_BACKEND"] = "kubernetes"
    container: Dict[str, Any] = {
        "name": "master", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": ["python3", os.path.join(SCRIPTS, "master.py"), str(workers)],
        "env": [{"name": k, "value": v} for k, v in env.items()]}
    pod: Dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"fiber-test": "master"}},
        "spec": {"restartPolicy": "Never", "serviceAccountName": "fiber",
                 "containers": [container]}}
    if "FIBER_KUBERNETES_MOUNTS" in env:  # the test node: tests/ comes from the host
        container["volumeMounts"] = [{"name": "tests", "mountPath": TESTS, "readOnly": True}]
        pod["spec"]["volumes"] = [{"name": "tests", "hostPath": {"path": TESTS}}]
    return pod


def test_master_pod_owns_its_workers_and_deleting_it_deletes_them(api):
    """A master in a pod: no image, no namespace configured (both found from its own pod);
    its workers carry an owner reference to it, so deleting it deletes them."""
    name = f"fiber-test-master-{os.getpid()}"
    api.create_namespaced_pod(NAMESPACE, _master_pod(name, 3))
    try:
        out: Dict[str, Any] = {}

        def result() -> bool:
            try:
                text = api.read_namespaced_pod_log(name, NAMESPACE) or ""  # None: no output yet
            except Exception:
                return False
            lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
            if lines:
                out.update(json.loads(lines[-1][len("RESULT "):]))
            return bool(lines)

        wait_until(result, 180, interval=1, message="the master pod's pool result")
        master = api.read_namespaced_pod(name, NAMESPACE)
        owned = [p for p in api.list_namespaced_pod(NAMESPACE).items
                 if any(r.uid == master.metadata.uid for r in p.metadata.owner_references or ())]
        assert len(owned) == 3 and set(out["hosts"]) == {p.metadata.name for p in owned}
        for p in owned:
            assert p.spec.containers[0].image == IMAGE  # the master pod's own image
            assert p.spec.service_account_name == "fiber"  # and its service account
        api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

        def workers_gone() -> bool:
            left = {p.metadata.name for p in api.list_namespaced_pod(NAMESPACE).items}
            return not left & {p.metadata.name for p in owned}

        wait_until(workers_gone, 90, interval=0.5,
                   message="the garbage collector deletes the workers")
    finally:
        try:
            api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        except Exception:
            pass


# -- the fiber command ----------------------------------------------------------------------


def test_fiber_run_runs_the_program_in_a_pod_with_its_pool_on_the_cluster(api):
    r = fiber_cli("run", "-b", "kubernetes", "-c", "pool_prefetch=5", "--", "python3", MAIN,
                  "3", timeout=600)
    assert r.returncode == 3, r.stderr
    got = tagged(r.stdout, "RESULT")
    job = started_job(r.stderr)
    assert got["squares"] == [x * x for x in range(20)]
    assert got["backend"] == "kubernetes" and got["prefetch"] == 5  # the command's config
    assert got["host"] == job  # it ran in its pod
    assert len(got["workers"]) == 2 and got["main"] not in got["workers"]
    assert f"{job} failed: exit code 3" in r.stderr
    program = job.split("-")[1]
    wait_until(lambda: not pods_of(api, program), 60, interval=0.5,
               message="the program's pods are deleted")


def test_fiber_run_detached_then_ps_logs_and_stop(api):
    r = fiber_cli("run", "-b", "kubernetes", "--detach", "--", "python3", MAIN, "hold")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    program = job.split("-")[1]
    try:
        ready_and_listed("kubernetes", job, 3)  # the main program and its 2 workers
        master = api.read_namespaced_pod(job, NAMESPACE)
        workers = [p for p in pods_of(api, program) if p.metadata.name != job]
        assert len(workers) == 2 and all(
            [r.uid for r in p.metadata.owner_references or ()] == [master.metadata.uid]
            for p in workers)  # owned by the main pod
        stop_program("kubernetes", program, lambda: not pods_of(api, program))
    finally:
        for p in pods_of(api, program):
            api.delete_namespaced_pod(p.metadata.name, NAMESPACE, grace_period_seconds=0)


def test_ctrl_c_on_fiber_run_deletes_the_program_and_its_workers(api):
    proc = fiber_popen("run", "-b", "kubernetes", "--", "python3", MAIN, "hold")
    program = ""
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line + proc.stderr.read()
        program = started_job(proc.stderr.readline()).split("-")[1]
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()
        wait_until(lambda: not pods_of(api, program), 60, interval=0.5,
                   message="the program's pods are deleted")
    finally:
        proc.kill()
        proc.wait()
        for p in pods_of(api, program) if program else []:
            api.delete_namespaced_pod(p.metadata.name, NAMESPACE, grace_period_seconds=0)
