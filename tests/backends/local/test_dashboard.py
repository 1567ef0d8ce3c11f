"""The web dashboard and /metrics (issue 31), against a running Pool(4): over HTTP, with
Prometheus's own parser, and in a real headless Chromium (Debian's ``chromium``, which
``scripts/test`` installs; without it the browser test is skipped by hand and fails
under CI=true).

The dashboard of these tests serves this test process's own snapshot
(`fiber._core._inspect.snapshot`), as a program's does; the config path
(``FIBER_DASHBOARD``) and ``fiber dashboard`` run in programs of their own.
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
from types import SimpleNamespace
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

import fiber
from fiber._core import _inspect
from fiber.dashboard import CACHE_S, COUNTS_ONLY, Dashboard, page, start
from fiber.errors import ConfigError
from fiber.testing.conformance.support.waiting import unusable, wait_until

pytestmark = pytest.mark.timeout(300)


def slow(x: float) -> float:
    time.sleep(x)
    return x


def chatty(x: float) -> float:
    sys.stdout.write(f"chatty {x}\n")  # one write: the line whole (PYTHONUNBUFFERED)
    sys.stdout.flush()
    return slow(x)


@pytest.fixture
def board() -> Iterator[Dashboard]:
    b = start(_inspect.snapshot, "127.0.0.1:0")
    try:
        yield b
    finally:
        b.close()


def _get(b: Dashboard, path: str, headers: Optional[Dict[str, str]] = None
         ) -> Tuple[int, Dict[str, str], str]:
    url = urllib.parse.urlsplit(b.address)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def test_every_route_needs_the_token(board: Dashboard) -> None:
    for path in ("/", "/api/snapshot", "/metrics", "/dashboard.js"):
        assert _get(board, path)[0] == 403
        assert _get(board, path + "?token=wrong")[0] == 403
        assert _get(board, path, {"Authorization": "Bearer wrong"})[0] == 403
    assert _get(board, f"/metrics?token={board.token}")[0] == 200
    assert _get(board, "/metrics", {"Authorization": f"Bearer {board.token}"})[0] == 200
    # the first visit sets a cookie (HttpOnly) that the page's requests carry
    status, headers, body = _get(board, f"/?token={board.token}")
    assert status == 200 and "dashboard.js" in body
    cookie = headers["set-cookie"].split(";")[0]
    assert "HttpOnly" in headers["set-cookie"]
    assert _get(board, "/api/snapshot", {"Cookie": cookie})[0] == 200
    assert _get(board, "/nothing", {"Cookie": cookie})[0] == 404


def test_a_refusal_says_whether_the_token_was_missing_or_wrong(board: Dashboard) -> None:
    """No token and a wrong one are both refused (403), each saying which: an address
    without its token, or one from an earlier run (a stale cookie, an old bookmark)."""
    missing = [{}, {"Authorization": "Bearer "}]
    wrong = [{"Authorization": "Bearer wrong"}, {"Cookie": "fiber_dashboard=old"}]
    for path in ("/", "/api/snapshot", "/metrics"):
        for status, _, body in ([_get(board, path, h) for h in missing]
                                + [_get(board, path + "?token=")]):
            assert status == 403 and body.startswith(
                "fiber dashboard: no token given: open the address fiber printed, with "
                "its ?token="), body
        for status, _, body in ([_get(board, path, h) for h in wrong]
                                + [_get(board, path + "?token=wrong")]):
            assert status == 403 and body.startswith(
                "fiber dashboard: wrong token: not this dashboard's"), body
            assert "no token given" not in body


def test_each_apply_task_has_its_own_number(board: Dashboard) -> None:
    """A worker running an ``apply`` shows which of the pool's applies it runs, as a
    map's task shows its item: ``apply(slow) (task 2)``, not ``(task 0)`` for all (a
    map's tasks between them take no number)."""
    with fiber.Pool(1) as pool:
        assert pool.apply_async(slow, (0.001,)).get(timeout=60) == 0.001
        assert pool.map(slow, [0.001] * 4, 1) == [0.001] * 4
        assert pool.apply(slow, (0.001,)) == 0.001
        pool.apply_async(slow, (30,))
        wait_until(lambda: [w.state for w in pool.status().workers] == ["running"], 60,
                   message="the worker running the third apply")
        status, _, body = _get(board, "/api/snapshot", {"Authorization":
                                                          f"Bearer {board.token}"})
        assert status == 200, body
        [mine] = [p for p in json.loads(body)["pools"] if p.get("size") == 1
                  and p["done"] == 6]
        assert [w["task"] for w in mine["workers"]] == ["apply(slow) (task 2)"], mine


def test_metrics_parse_and_agree_with_the_map(board: Dashboard) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with fiber.Pool(4) as pool:
        # a dashboard's first look turns on the pool's histograms (a pool nobody looks
        # at pays nothing for them, FIBER_DASHBOARD set or not)
        assert _get(board, f"/metrics?token={board.token}")[0] == 200
        assert pool.map(slow, [0.001] * 200, 5) == [0.001] * 200
        time.sleep(CACHE_S)  # a snapshot serves the requests of the next CACHE_S seconds
        status, headers, text = _get(board, f"/metrics?token={board.token}")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        samples: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        names = {labels[0][1] for (name, labels) in samples if name == "fiber_pool_size"}
        # this pool: the one whose size is 4 and whose done count is the map's
        mine = [n for n in names if samples[("fiber_pool_size", (("pool", n),))] == 4
                and samples[("fiber_pool_tasks_done_total", (("pool", n),))] == 200]
        assert len(mine) == 1, text
        pool_label = (("pool", mine[0]),)
        assert samples[("fiber_pool_tasks_failed_total", pool_label)] == 0
        assert samples[("fiber_pool_tasks_pending", pool_label)] == 0
        assert samples[("fiber_pool_workers", (("pool", mine[0]), ("state", "idle")))] == 4
        ran = "fiber_pool_task_duration_seconds"
        waited = "fiber_pool_result_latency_seconds"

        def bucket(name: str, le: str) -> float:
            return samples[(name + "_bucket", (("le", le), ("pool", mine[0])))]

        assert bucket(ran, "0.0005") == 0  # none ran under the 1 ms it slept
        assert bucket(ran, "+Inf") == samples[(ran + "_count", pool_label)] == 200
        assert samples[(waited + "_count", pool_label)] == 200
        assert samples[(waited + "_sum", pool_label)] >= samples[(ran + "_sum", pool_label)]
        before = {le: bucket(ran, le) for le in ("0.1", "0.25", "+Inf")}
        # four tasks of 150 ms: in the bucket up to 0.25 s, not in the one up to 0.1 s
        assert pool.map(slow, [0.15] * 4, 1) == [0.15] * 4
        time.sleep(CACHE_S)
        text = _get(board, f"/metrics?token={board.token}")[2]
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert bucket(ran, "0.1") == before["0.1"]
        assert bucket(ran, "0.25") == before["0.25"] + 4
        assert bucket(ran, "+Inf") == before["+Inf"] + 4 == 204
        assert samples[(waited + "_count", pool_label)] == 204
        # every task carried its argument, every result its value: bytes both ways
        sent = samples[("fiber_pool_sent_bytes_total", pool_label)]
        received = samples[("fiber_pool_received_bytes_total", pool_label)]
        assert sent >= 44 * len(pickle.dumps(0.001)) and received >= 44 * len(pickle.dumps(0.001))


def test_a_page_of_the_worker_table_and_every_worker_counted(board: Dashboard) -> None:
    """The page asks for a page of each pool's worker table (``?workers=FIRST:COUNT``):
    only those rows are built and sent, while every worker is still counted by state
    (what the page says above the table, and what /metrics gives)."""
    with fiber.Pool(4) as pool:
        assert pool.map(slow, [0.001] * 8, 1) == [0.001] * 8
        names = [w.name for w in pool.status().workers]
        headers = {"Authorization": f"Bearer {board.token}"}

        def mine(path: str) -> Dict[str, object]:
            status, _, body = _get(board, path, headers)
            assert status == 200, body
            found = [p for p in json.loads(body)["pools"] if p.get("size") == 4
                     and p["done"] == 8]
            assert len(found) == 1, body
            return found[0]

        status, _, body = _get(board, "/api/snapshot?workers=1:2", headers)
        snap = json.loads(body)  # the processes (the workers among them): the first 2
        assert len(snap["processes"]) == 2 and snap["processes_total"] >= 4, body
        assert sum(snap["process_states"].values()) == snap["processes_total"], body
        paged = mine("/api/snapshot?workers=1:2")
        assert [w["name"] for w in paged["workers"]] == names[1:3]  # type: ignore[index]
        # the task stream: the page's workers' bars only (and those of lost workers)
        assert {bar[0] for bar in paged["stream"]} <= set(names[1:3]), paged  # type: ignore[union-attr]
        assert paged["workers_from"] == 1 and paged["workers_total"] == 4
        assert paged["worker_states"] == {"idle": 4} and paged["restarts"] == 0
        whole = mine("/api/snapshot")
        assert [w["name"] for w in whole["workers"]] == names  # type: ignore[index]
        assert sum(bar[4] for bar in whole["stream"]) == 8, whole  # type: ignore[union-attr]
        past = mine("/api/snapshot?workers=8:100")  # past the end: no row, still counted
        assert past["workers"] == [] and past["workers_total"] == 4
        assert mine("/api/snapshot?workers=bad")["workers_total"] == 4  # not such: all


def test_an_attached_snapshot_is_cut_to_the_page_asked() -> None:
    """``fiber dashboard PID`` gets every row from the program (as ``fiber top``): the
    dashboard cuts it to the page and counts what it cut."""
    workers = [{"name": f"PoolWorker-{i}", "state": "running" if i % 2 else "idle",
                "restarts": 1 if i == 3 else 0} for i in range(1, 6)]
    procs = [{"name": w["name"], "state": "running"} for w in workers]
    snap = {"pools": [{"name": "Pool-1", "workers": workers}], "processes": procs}
    pool = page(snap, (3, 2))["pools"][0]
    assert [w["name"] for w in pool["workers"]] == ["PoolWorker-4", "PoolWorker-5"]
    assert pool["workers_total"] == 5 and pool["workers_from"] == 3
    assert pool["worker_states"] == {"running": 3, "idle": 2} and pool["restarts"] == 1
    assert [p["name"] for p in snap["processes"]] == ["PoolWorker-1", "PoolWorker-2"]
    assert snap["processes_total"] == 5 and snap["process_states"] == {"running": 5}
    own = {"pools": [{"name": "Pool-2", "workers": [], "worker_states": {"idle": 9},
                      "workers_total": 9, "workers_from": 0, "restarts": 0}],
           "processes": [], "processes_total": 9, "process_states": {"running": 9}}
    assert page(own, (0, 100)) == own  # a program's own snapshot comes cut already


class _Child:
    """A child process as `_describe.children` reads it, counting the records built."""

    built = 0

    def __init__(self, n: int) -> None:
        self.name, self.daemon = f"Process-{n}", False

    @property
    def ident(self) -> int:
        _Child.built += 1
        return 1000 + len(self.name)


def test_a_programs_children_are_counted_and_only_the_page_built() -> None:
    """A Pool(1024)'s master has 1,024 children: a page (and /metrics, no row) builds the
    records it shows and counts the others by state, without a record each."""
    from fiber.process import _describe

    def job(code: Optional[int]) -> SimpleNamespace:
        return SimpleNamespace(handle=SimpleNamespace(job_id="7"), remote_host="here",
                               started_at=time.monotonic(), finished=code is not None,
                               exitcode=lambda: code)

    procs = [(_Child(n), job(1 if n == 4 else None)) for n in range(1, 6)]
    procs.append((_Child(6), None))  # not started: not a job yet
    _Child.built = 0
    shown = _describe.children(procs, (3, 2))  # a page's rows: the first 2 processes
    assert [p["name"] for p in shown.rows] == ["Process-1", "Process-2"]
    assert shown.counts == {"processes_total": 5,
                            "process_states": {"running": 4, "exit code 1": 1}}
    assert _Child.built == 2
    assert _describe.children(procs, (0, 0)).rows == []  # /metrics: counts only
    assert len(_describe.children(procs).rows) == 5  # fiber top: every one

    class Owner:
        pass

    owners = [Owner(), Owner()]  # two sources of one kind: their counts add up
    for owner in owners:
        _inspect.add_source("probes", owner, lambda _: shown)
    snap = _inspect.snapshot()
    assert [p["name"] for p in snap["probes"]] == ["Process-1", "Process-2"] * 2
    assert snap["processes_total"] >= 10 and snap["process_states"]["exit code 1"] >= 2
    del owners


def test_metrics_after_a_page_are_served_by_its_snapshot() -> None:
    """Every snapshot counts every worker and process, which is all /metrics reads: a
    scrape that follows a page's poll costs the program nothing more."""
    taken: List[Optional[Tuple[int, int]]] = []

    def source() -> Dict[str, object]:
        taken.append(_inspect.rows_wanted())
        return {"pools": [], "processes": []}

    b = Dashboard(source)
    try:
        b.snapshot((0, 100))
        b.snapshot(COUNTS_ONLY)
        assert taken == [(0, 100)]
        b.snapshot((100, 100))  # another page: its own rows
        assert taken == [(0, 100), (100, 100)]
        time.sleep(CACHE_S)
        b.snapshot(COUNTS_ONLY)  # nothing recent: a snapshot of no row
        assert taken == [(0, 100), (100, 100), (0, 0)]
    finally:
        b.close()


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    unusable("a headless Chromium (Debian's chromium)", "no chromium on PATH")


def _render(url: str) -> str:
    """The page's DOM once its script has run (Chromium's virtual time: 3 s of it)."""
    with tempfile.TemporaryDirectory() as profile:
        cp = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                             f"--user-data-dir={profile}", "--virtual-time-budget=3000",
                             "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and "<body" in cp.stdout, cp.stderr[-2000:]
    return cp.stdout


def test_the_page_in_a_real_browser_follows_a_pool_and_a_lost_worker(
        board: Dashboard) -> None:
    with fiber.Pool(4) as pool:
        # 20 s of tasks: still running through two renders and a replacement on a
        # loaded machine (Chromium took over 5 s a render there: a map of 6 s ended first)
        result = pool.map_async(chatty, [0.2] * 400, 1)
        wait_until(lambda: pool.status().done >= 8, 60, message="the map under way")
        dom = _render(board.url)
        workers = re.findall(r'data-worker="(PoolWorker-\d+)" data-state="(\w+)"', dom)
        names = sorted({w for w, _ in workers})
        assert len(names) >= 4 and any(s == "running" for _, s in workers), dom
        # the table's page: its rows of every worker, the rest counted by state
        assert re.search(r'class="shown">workers 1-4 of 4<', dom), dom
        done = [int(m) for m in re.findall(r'class="progress">(\d+) of \d+ tasks', dom)]
        assert done and max(done) >= 8, dom
        # the task stream: bars of done tasks, on the workers' rows
        assert len(re.findall(r'<rect class="bar done"[^>]*data-worker="PoolWorker-\d+"', dom)) >= 4
        # the workers' output, each chunk with its job's name
        assert re.search(r'data-job="PoolWorker-\d+">\(PoolWorker-\d+\) chatty 0.2', dom), dom

        victim = pool.status().workers[0]
        pid = next(c.ident for c in fiber.active_children() if c.name == victim.name)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: any(w.restarts for w in pool.status().workers), 60,
                   message="the lost worker replaced")
        dom = _render(board.url)
        assert re.search(r"<li>[^<]*" + re.escape(victim.name) + r"[^<]*was lost", dom), dom
        # its tasks given back: an orange bar on its row
        assert re.search(r'<rect class="bar lost"[^>]*data-worker="' + re.escape(victim.name)
                         + '"', dom), dom
        restarts = re.findall(r'data-worker="PoolWorker-\d+" data-state="\w+"[^>]*>'
                              r"(?:<td>.*?</td>){8}<td>1</td>", dom)
        assert restarts, dom  # the replacement shows its place's restart
        assert result.get(180) == [0.2] * 400


PROGRAM = textwrap.dedent("""
    import sys, time
    import fiber

    def slow(x):
        time.sleep(x)
        return x

    def sleepy_user_function(x):
        time.sleep(x)
        return x

    if __name__ == "__main__":
        with fiber.Pool(2) as pool:
            pool.map(slow, [0.01] * 10)
            pool.map_async(sleepy_user_function, [60, 60], 1)
            # its workers may run tasks before their start returns (each says hello at
            # once): pool._pool waits for it, after which they are this program's jobs
            assert len(pool._pool) == 2
            print("READY", flush=True)
            sys.stdin.readline()
            pool.terminate()
""")


def _program(env: Dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _first_line(stream: object, pattern: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        line = stream.readline()  # type: ignore[attr-defined]
        if not line:
            break
        if re.search(pattern, line):
            return str(line)
    return ""


def test_the_config_turns_it_on_and_fiber_dashboard_attaches() -> None:
    env = {**os.environ, "FIBER_DASHBOARD": "127.0.0.1:0"}
    prog = _program(env)
    try:
        line = _first_line(prog.stderr, r"fiber: dashboard at http://127\.0\.0\.1:\d+/\?token=",
                           time.monotonic() + 60)
        assert line, "no dashboard line from the program"
        assert prog.stdout is not None and prog.stdout.readline().strip() == "READY"
        url = urllib.parse.urlsplit(line.split(" at ", 1)[1].strip())

        def get(path: str) -> Tuple[int, str]:
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
            conn.request("GET", f"{path}{'&' if '?' in path else '?'}{url.query}")
            r = conn.getresponse()
            return r.status, r.read().decode()

        body = get("/api/snapshot")[1]
        assert '"pools"' in body and '"PoolWorker-1"' in body, body
        # the workers' jobs run on this host: their CPU and memory are read in /proc by
        # the program, from the first look, without waking them (jobs on other hosts
        # report while watched: tests/backends/netns, the dashboard test)
        first = json.loads(body)["pools"][0]["workers"]
        assert all(w["rss_mb"] > 1 and w["cpu_percent"] >= 0 for w in first), body
        # its live jobs as the cluster (here: this machine) sees them, in /metrics too
        assert json.loads(body)["cluster"]["jobs"] == {"local": {"running": 2}}, body
        # the histograms count from the first look, dashboard in the config or not:
        # the 10 tasks done before it are not in them (a program nobody looks at pays
        # nothing for them; test_metrics_parse_and_agree_with_the_map: those after)
        looked = json.loads(body)["pools"][0]
        assert looked["done"] == 10 and looked["durations"]["count"] == 0, body
        assert 'fiber_jobs{backend="local",state="running"} 2' in get("/metrics")[1]
        # each worker's job answers with its threads' stacks, busy in the user's function
        status, stack = get("/api/stack?worker=PoolWorker-1")
        assert status == 200 and "sleepy_user_function" in stack, stack
        assert re.search(r"Thread MainThread:\n(.*\n)*.*in sleepy_user_function", stack), stack
        assert get("/api/stack?worker=nobody")[0] == 404

        # fiber dashboard PID: the same, attached from outside
        attach = subprocess.Popen([sys.executable, "-m", "fiber", "dashboard", str(prog.pid)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = _first_line(attach.stderr, r"fiber: dashboard at ", time.monotonic() + 60)
            assert line, "fiber dashboard said nothing"
            url = urllib.parse.urlsplit(line.split(" at ", 1)[1].strip())
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
            conn.request("GET", "/metrics?" + url.query)
            text = conn.getresponse().read().decode()
            assert 'fiber_pool_tasks_done_total{pool="Pool-1"} 10' in text, text
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
            conn.request("GET", "/api/stack?worker=PoolWorker-1&" + url.query)
            assert conn.getresponse().status == 501  # stacks: the program's own only

            # the jobs as the cluster sees them: asked by the program on a thread of its
            # own (not its hub's) once a viewer looks, given with the next snapshots
            def cluster() -> object:
                conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
                conn.request("GET", "/api/snapshot?" + url.query)
                return json.loads(conn.getresponse().read())["cluster"]

            wait_until(lambda: cluster() is not None, 30, message="the attached cluster view")
            assert cluster()["jobs"] == {"local": {"running": 2}}  # type: ignore[index]
            top = subprocess.run([sys.executable, "-m", "fiber", "top", "--once",
                                  str(prog.pid)], capture_output=True, text=True, timeout=60)
            assert "Jobs on the cluster (asked " in top.stdout, top.stdout + top.stderr
            assert "local: running 2" in top.stdout, top.stdout
        finally:
            attach.terminate()
            attach.wait(30)
    finally:
        assert prog.stdin is not None
        prog.stdin.write("\n")
        prog.stdin.flush()
        prog.wait(60)


def test_a_wrong_address_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="dashboard.*HOST:PORT"):
        fiber.config.from_dict({"dashboard": "nowhere"})
    taken = start(_inspect.snapshot, "127.0.0.1:0")
    try:
        port = urllib.parse.urlsplit(taken.address).port
        env = {**os.environ, "FIBER_DASHBOARD": f"127.0.0.1:{port}"}
        prog = _program(env)
        _, err = prog.communicate("\n", timeout=60)
        assert prog.returncode != 0 and "fiber config 'dashboard': cannot serve at" in err, err
    finally:
        taken.close()


@pytest.mark.parametrize("address, said", [("127.0.0.1:0", False), ("0.0.0.0:0", True)])
def test_a_dashboard_beyond_loopback_says_its_page_is_plain_http(
        address: str, said: bool, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 48: the page is HTTP; served beyond loopback, the program says so once, and
    how to reach it through ssh instead."""
    b = start(_inspect.snapshot, address)
    try:
        err = capfd.readouterr().err
        assert "fiber: dashboard at" in err
        assert ("plain HTTP" in err and "ssh -L" in err) == said, err
    finally:
        b.close()
