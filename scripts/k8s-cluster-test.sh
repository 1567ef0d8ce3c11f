#!/usr/bin/env bash
# k8s-cluster-test.sh - run fiber's kubernetes backend tests on a REAL cluster of yours (kind,
# minikube, GKE, ...), the same tests scripts/test runs on its one-node test cluster.
#
#   scripts/k8s-cluster-test.sh IMAGE [NAMESPACE]
#
# IMAGE: built from deploy/Dockerfile.tests with --build-arg REPO=$PWD and pullable by the
#   cluster (pushed to a registry; or `kind load docker-image IMAGE`, `minikube image load`).
# NAMESPACE (default fiber-test): created if missing; deploy/rbac.yaml is applied in it and
#   every pod runs with its service account `fiber`.
# Uses the current kubectl context (KUBECONFIG). Pods must be able to reach this machine:
# set FIBER_LISTEN_HOST to an address of it that they can reach when the one on the route to
# the API server is not (kind: the Docker network's gateway, often 172.18.0.1; a laptop
# behind NAT cannot host the master for a cloud cluster - run pytest in a pod instead).
# Extra arguments after NAMESPACE go to pytest.
#
# Two tests need a path shared by this machine and the pods (they pass files through
# tmp_path): set FIBER_KUBERNETES_MOUNTS and TMPDIR to such a path on one-node clusters,
# or expect the suite's test_pool_crash.py::*file* to fail on others.
set -euo pipefail
IMAGE=${1:?usage: $0 IMAGE [NAMESPACE] [pytest args...]}
NAMESPACE=${2:-fiber-test}
shift $(( $# >= 2 ? 2 : 1 ))
cd "$(dirname "$0")/.."
./scripts/bootstrap-venv
kubectl get namespace "$NAMESPACE" >/dev/null 2>&1 || kubectl create namespace "$NAMESPACE"
kubectl apply -n "$NAMESPACE" -f deploy/rbac.yaml
export FIBER_IMAGE=$IMAGE FIBER_KUBERNETES_NAMESPACE=$NAMESPACE
export FIBER_KUBERNETES_SERVICE_ACCOUNT=fiber
# small CPU requests: the API suite starts dozens of short-lived pods
export FIBER_CPU_PER_JOB=${FIBER_CPU_PER_JOB:-0.1}
status=0
# the API suite (fiber.testing.conformance; from this checkout, its tests' node ids start with
# src/fiber/testing/conformance/)
.venv/bin/python -m pytest -q --fiber-backend kubernetes --pyargs fiber.testing.conformance \
  -m "not local_pids" --deselect \
  src/fiber/testing/conformance/test_process.py::test_child_exception_traceback_reaches_stderr \
  "$@" || status=1
.venv/bin/python -m pytest -q tests/backends/kubernetes "$@" || status=1
exit $status
