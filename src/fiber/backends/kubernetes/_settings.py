"""The settings of the ``kubernetes`` backend.

Each key is ``kubernetes_<key>`` in ``fiber.init``, ``FIBER_KUBERNETES_<KEY>`` in the
environment, and ``<key>`` in the ``[fiber.kubernetes]`` section of ``.fiberconfig`` (see
``fiber.config``); its meaning is its ``#:`` comment, shown in the generated configuration
reference."""

from __future__ import annotations

import dataclasses

__all__ = ["KubernetesSettings"]


@dataclasses.dataclass(frozen=True)
class KubernetesSettings:
    """What the program's configuration says of the ``kubernetes`` backend."""

    #: Namespace of the ``kubernetes`` backend's pods; empty: the master pod's own namespace
    #: when the master runs in a pod, else the kubeconfig context's, else ``default``.
    namespace: str = ""
    #: kubeconfig file of the ``kubernetes`` backend; empty: the pod's service account when
    #: the master runs in a pod, else ``KUBECONFIG`` or ``~/.kube/config``.
    kubeconfig: str = dataclasses.field(default="", metadata={"machine": True})
    #: ``host:port`` at which processes in pods reach the API server (to start their own
    #: children); empty: the cluster's ``kubernetes`` service. Set it on a cluster whose
    #: service address pods cannot reach (no kube-proxy).
    pod_api_server: str = ""
    #: Service account of fiber's pods; empty: the master pod's own, else the namespace's
    #: default. Processes in pods that start children need the rights of deploy/rbac.yaml.
    service_account: str = ""
    #: ``imagePullPolicy`` of fiber's pods (``Always``, ``IfNotPresent``, ``Never``);
    #: empty: the cluster's default (``Always`` for a ``:latest`` image).
    image_pull_policy: str = ""
    #: Seconds a pod may wait on something that needs a person (unschedulable, image pull
    #: back-off) before its job fails with the cluster's reason; 0: wait for ever (an
    #: autoscaling cluster adds nodes for unschedulable pods).
    pending_timeout: float = 60.0
    #: Pods get CPU limits equal to their requests; False: requests only (no CFS
    #: throttling; the pod may use idle CPUs of its node).
    cpu_limits: bool = True
    #: hostPath volumes of every pod, comma-separated ``node_path[:pod_path][:ro]``: for
    #: one-node clusters (kind, minikube) and node-local data; the pod path defaults to the
    #: node path.
    mounts: str = ""
    #: PersistentVolumeClaims mounted in every pod, comma-separated
    #: ``claim[:pod_path][:ro]``; the pod path defaults to ``/persistent`` (where the
    #: original fiber's ``fiber run -v CLAIM`` mounted it). ``fiber run -v`` adds to it.
    volume_claims: str = ""
    #: Seconds each call to the Kubernetes API may take before it fails (no hang).
    timeout: float = 30.0
    #: Seconds each pod may run (its ``activeDeadlineSeconds``: then the kubelet ends it,
    #: SIGTERM and SIGKILL 10 s later, reason DeadlineExceeded); 0: no limit. With a
    #: limit, a pool renews its workers before it, and a worker ended by it retires.
    active_deadline: int = 0

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout!r}")
        if self.active_deadline < 0:
            raise ValueError(f"active_deadline must not be negative, got "
                             f"{self.active_deadline!r}")
        if self.pending_timeout < 0:
            raise ValueError(f"pending_timeout must not be negative, got "
                             f"{self.pending_timeout!r}")
        if self.image_pull_policy not in ("", "Always", "IfNotPresent", "Never"):
            raise ValueError(f"image_pull_policy must be Always, IfNotPresent or Never, got "
                             f"{self.image_pull_policy!r}")
