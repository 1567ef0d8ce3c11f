"""Where the kubernetes backend's API calls go: the credentials (``kubernetes_kubeconfig``;
else, in a pod, its service account, the API server at ``kubernetes_pod_api_server`` if
set; else ``KUBECONFIG`` or ``~/.kube/config``), the API client made from them, and what
the API says of the pod this process runs in, if it runs in one."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from typing import TYPE_CHECKING, Any, Dict, Optional
from urllib.parse import urlsplit

from ..._log import log
from ...errors import SubmitError
from .._common import PARALLEL
from ._pods import POD_NAME_ENV, POD_NAMESPACE_ENV, api_reason
from ._settings import KubernetesSettings
from ._watch import PodWatch

if TYPE_CHECKING:
    import types

__all__ = ["Cluster", "connect", "in_pod", "SERVICE_ACCOUNT_DIR"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclasses.dataclass
class Cluster:
    """An API client and what it tells about where this process runs."""

    api: Any  # kubernetes.client.CoreV1Api
    host: str  # the API server's host name or address
    namespace: str
    own: Optional[Dict[str, Any]]  # this process's own pod (JSON), if it runs in one
    watch: Optional[PodWatch] = None  # of this program's pods (started on first use)
    node_cpus: Optional[int] = None  # of its smallest node, once asked (see node_cpus)


def in_pod() -> bool:
    return os.path.exists(os.path.join(SERVICE_ACCOUNT_DIR, "token"))


def own_namespace() -> str:
    """The namespace of the pod this process runs in ('' outside a pod)."""
    namespace = os.environ.get(POD_NAMESPACE_ENV, "")
    if not namespace:
        try:
            with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"), encoding="utf-8") as f:
                namespace = f.read().strip()
        except OSError:
            pass
    return namespace


def connect(own: KubernetesSettings, k8s: types.ModuleType) -> Cluster:
    """The API client of the cluster ``own`` (the backend's settings) names, made with
    the Kubernetes client module ``k8s``.

    Raises:
        SubmitError: no credentials were found.
    """
    conf = k8s.client.Configuration()
    namespace = ""
    try:
        if own.kubeconfig or not in_pod():
            # KUBECONFIG read now: the client reads it once, when first imported
            path = (own.kubeconfig or os.environ.get("KUBECONFIG")
                    or os.path.expanduser("~/.kube/config"))
            k8s.config.load_kube_config(config_file=path, client_configuration=conf)
            _, active = k8s.config.list_kube_config_contexts(config_file=path)
            namespace = str((active or {}).get("context", {}).get("namespace") or "")
        else:
            environ = dict(os.environ)
            if own.pod_api_server:
                host, _, port = own.pod_api_server.rpartition(":")
                environ.update(KUBERNETES_SERVICE_HOST=host.strip("[]"),
                               KUBERNETES_SERVICE_PORT=port)
            k8s.config.incluster_config.InClusterConfigLoader(
                token_filename=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
                cert_filename=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"),
                environ=environ).load_and_set(conf)
    except Exception as e:
        raise SubmitError(f"cannot find credentials for the Kubernetes API: {e} (set "
                          "kubernetes_kubeconfig, KUBECONFIG, or run in a pod)") from e
    conf.retries = 1
    conf.connection_pool_maxsize = PARALLEL + 2  # parallel creation reuses connections
    api = k8s.client.CoreV1Api(k8s.client.ApiClient(conf))
    pod = _own_pod(api, own.timeout) if in_pod() else None
    if in_pod() and not namespace:
        namespace = own_namespace()
    return Cluster(api, urlsplit(conf.host).hostname or "",
                   own.namespace or namespace or "default", pod)


def _own_pod(api: Any, timeout: float) -> Optional[Dict[str, Any]]:
    """This process's own pod (JSON), found by its name, or None."""
    name = os.environ.get(POD_NAME_ENV) or socket.gethostname()
    namespace = own_namespace()
    if not namespace:
        return None
    try:
        resp = api.read_namespaced_pod(name, namespace, _preload_content=False,
                                       _request_timeout=timeout)
        return dict(json.loads(resp.data))
    except Exception as e:
        log("kubernetes: cannot read own pod %s/%s: %s", namespace, name, api_reason(e))
        return None
