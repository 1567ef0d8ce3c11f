"""What the kubernetes backend's status costs on the wire: bytes between the master and
the API server, for a pool's start, its steady state and its end.

The master's API traffic goes through a counting TCP relay (tests/support/tcp_proxy.py,
on 127.0.0.1, which the test node's certificate names): every byte of the TLS stream,
requests and answers, headers and handshakes included. The pool's workers talk to the
master directly, not through it. Phases:

- ``start``: ``Pool(N)`` until its map is done and every pod runs, and 5 s more (N pod
  creations and their events; ``ceil(N / K)`` with ``--per-job K``, jobs of K workers);
- ``steady``: the pool idle for ``--seconds`` (the job watcher polls status every 2 s):
  reported per minute;
- ``end``: the pool closed and joined, until no pod of it is left (N pods deleted).

The wait for the pods' phases asks the API server without the relay.

With ``--before REV``, the same run with the tree of git revision REV (its ``src/``,
exported to a temporary directory) in a process of its own: the backend before a change,
measured in the same run; ``--after REV`` measures a revision instead of the working
tree. On the test node::

    scripts/k8s-node.sh start && eval "$(scripts/k8s-node.sh test-env)"
    python benchmarks/k8s_status_bytes.py --workers 16 --seconds 180 --before a68cb52 \
        --after d72daa5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
from support.tcp_proxy import TcpProxy  # noqa: E402 - the tests' relay

sys.path.insert(0, HERE)
from _common import table  # noqa: E402


def square(x: int) -> int:
    return x * x


def _proxied_kubeconfig(proxy_dir: str) -> Tuple[TcpProxy, str]:
    import yaml

    with open(os.environ["KUBECONFIG"], encoding="utf-8") as f:
        conf = yaml.safe_load(f)
    server = urlsplit(conf["clusters"][0]["cluster"]["server"])
    proxy = TcpProxy(server.hostname or "", server.port or 443)
    conf["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = os.path.join(proxy_dir, "kubeconfig")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(conf, f)
    return proxy, path


def measure(workers: int, seconds: float, per_job: int = 1,
            cpu: Optional[float] = None) -> Dict[str, Any]:
    """One run in this process: the phases' bytes (received, sent) and connections."""
    import fiber

    with tempfile.TemporaryDirectory() as tmp:
        proxy, kubeconfig = _proxied_kubeconfig(tmp)
        # the pods reach the master on the route to the API server, not to the relay
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect(proxy.target)
        listen_host = probe.getsockname()[0]
        probe.close()
        fiber.init(backend="kubernetes", kubernetes_kubeconfig=kubeconfig,
                   listen_host=listen_host)
        out: Dict[str, Any] = {"fiber": os.path.dirname(fiber.__file__)}
        mark = proxy.counts()
        t0 = time.monotonic()

        def phase(name: str) -> None:
            nonlocal mark, t0
            now = proxy.counts()
            out[name] = {"received": now[0] - mark[0], "sent": now[1] - mark[1],
                         "connections": now[2] - mark[2],
                         "seconds": time.monotonic() - t0}
            mark, t0 = now, time.monotonic()

        phases = _pods_seen_directly()
        try:
            pool = fiber.Pool(workers, workers_per_job=per_job, cpu=cpu)
            assert pool.map(square, range(workers * 4), chunksize=1) == [
                x * x for x in range(workers * 4)]
            phases(lambda pods: pods == ["Running"] * -(-workers // per_job))
            time.sleep(5)  # the last events of the start reach the master
            phase("start")
            time.sleep(seconds)
            phase("steady")
            pool.close()
            pool.join()
            phases(lambda pods: not pods)
            phase("end")
        finally:
            proxy.close()
    return out


def _pods_seen_directly() -> Callable[[Callable[[List[str]], bool]], None]:
    """Wait until the phases of the program's pods, as an API client of this benchmark
    sees them without the relay, satisfy a predicate."""
    import kubernetes

    from fiber.backends import get_backend

    kubernetes.config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    api = kubernetes.client.CoreV1Api()
    selector = f"fiber.program={get_backend('kubernetes').program}"

    def wait(predicate: Callable[[List[str]], bool]) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            pods = api.list_namespaced_pod(os.environ["FIBER_KUBERNETES_NAMESPACE"],
                                           label_selector=selector).items
            if predicate(sorted(p.status.phase for p in pods)):
                return
            time.sleep(0.5)
        raise TimeoutError("the pool's pods did not get there in 600 s")

    return wait


def _run_tree(src: str, workers: int, seconds: float, layout: List[str]) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH", "")) if p))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--workers", str(workers),
                        "--seconds", str(seconds), *layout, "--json"], env=env,
                       capture_output=True,
                       text=True, timeout=seconds + 900)
    if r.returncode:
        raise SystemExit(f"the run of {src} failed:\n{r.stderr}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def _export(rev: str, into: str) -> str:
    archive = subprocess.run(["git", "-C", REPO, "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return os.path.join(into, "src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--before", default="", help="a git revision to measure too")
    parser.add_argument("--after", default="",
                        help="a git revision to measure instead of the working tree")
    parser.add_argument("--per-job", type=int, default=1,
                        help="workers a pod (Pool(workers_per_job=...)): ceil(N / K) pods")
    parser.add_argument("--cpu", type=float, default=None,
                        help="CPUs a worker asks for (a pod of K asks K times it)")
    parser.add_argument("--json", action="store_true", help="one run, as JSON (internal)")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.workers, args.seconds, args.per_job, args.cpu)))
        return
    layout = ["--per-job", str(args.per_job)] + (
        ["--cpu", str(args.cpu)] if args.cpu is not None else [])
    runs: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            runs[f"before ({args.before})"] = _run_tree(_export(args.before, tmp),
                                                        args.workers, args.seconds, layout)
        if args.after:
            after = os.path.join(tmp, "after")
            os.mkdir(after)
            runs[f"after ({args.after})"] = _run_tree(_export(args.after, after),
                                                      args.workers, args.seconds, layout)
        else:
            runs["this tree"] = _run_tree(os.path.join(REPO, "src"), args.workers,
                                          args.seconds, layout)
    rows = []
    for name, run in runs.items():
        for ph in ("start", "steady", "end"):
            r = run[ph]
            scale = 60.0 / r["seconds"] if ph == "steady" else 1.0
            rows.append([name, ph + (" (a minute)" if ph == "steady" else ""),
                         f"{r['seconds']:.0f} s", round(r["received"] * scale),
                         round(r["sent"] * scale), round(r["connections"] * scale, 1)])
    jobs = f" in jobs of {args.per_job}" if args.per_job > 1 else ""
    table(f"Pool({args.workers}){jobs} on kubernetes: bytes between the master and the API server",
          ["tree", "phase", "took", "received B", "sent B", "connections"], rows)


if __name__ == "__main__":
    main()
