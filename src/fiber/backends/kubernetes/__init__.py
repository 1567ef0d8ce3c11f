"""The ``kubernetes`` backend: every fiber process is a pod of one Kubernetes cluster.

- `_backend`: `KubernetesBackend` (create, watch, delete pods).
- `_pods`: a job's pod manifest, and a pod's status as a job's.
- `_cluster`: the credentials, the API client, and this process's own pod if it runs in one.
- `_watch`: the watch of the program's pods.
"""

from ..._exports import publish
from ._backend import LABEL_JOB, LABEL_PROGRAM, KubernetesBackend, pod_manifest, pod_status
from ._pods import parse_claims

__all__ = ["KubernetesBackend", "pod_manifest", "pod_status", "parse_claims", "LABEL_PROGRAM",
           "LABEL_JOB"]

publish(__name__, KubernetesBackend)
