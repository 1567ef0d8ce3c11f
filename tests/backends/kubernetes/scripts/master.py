"""A master that runs in a pod (tests/backends/kubernetes/test_kubernetes.py creates that pod).

It is given no image and no namespace: the backend must find both from its own pod. It
prints its pool's worker hosts, then holds the pool until the test deletes its pod. SIGTERM
is ignored, so that no exit hook of this process can delete the workers: when the pod is
force-deleted, only the cluster's garbage collector (the workers' owner references) can.
"""

import json
import signal
import socket
import sys
import time

import fiber


def host(_: int) -> str:
    time.sleep(0.05)
    return socket.gethostname()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with fiber.Pool(int(sys.argv[1]) if len(sys.argv) > 1 else 3) as pool:
        hosts = sorted(set(pool.map(host, range(30), chunksize=1)))
        print("RESULT " + json.dumps({"hosts": hosts, "master": socket.gethostname()}),
              flush=True)
        time.sleep(3600)
