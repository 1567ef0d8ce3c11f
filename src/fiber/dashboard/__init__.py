"""A web dashboard and Prometheus metrics for a running fiber program.

Off by default. On with ``fiber.init(dashboard="127.0.0.1:0")`` (or ``FIBER_DASHBOARD``,
or the ``.fiberconfig`` key ``dashboard``; port 0: a free one), in the program's main
process, or from outside with ``fiber dashboard [PROGRAM]`` on the machine of a running
program's main process (it attaches as ``fiber top`` does, so the program pays nothing
until then). Either way one line on stderr gives the address and its token.

Its routes and server: the API reference's page of this module."""

from __future__ import annotations

import collections
import hmac
import http.server
import importlib.resources
import ipaddress
import json
import secrets
import sys
import threading
import time
import urllib.parse
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._core import _inspect
from .._process_state import here
from ..errors import ConfigError
from ..process import _cluster_view, _inspected
from . import _metrics

__all__ = ["Dashboard", "start", "parse_address", "serve_program", "page", "CACHE_S",
           "COUNTS_ONLY"]

Source = Callable[[], Dict[str, Any]]
Stacks = Callable[[str], str]
_COOKIE = "fiber_dashboard"
#: Seconds a snapshot serves the requests that follow it (see `Dashboard.snapshot`).
CACHE_S = 0.5
#: The rows /metrics asks for: none, only the counts every snapshot has.
COUNTS_ONLY: _inspect.Rows = (0, 0)

_ASSETS = MappingProxyType({"/": ("index.html", "text/html; charset=utf-8"),
                            "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
                            "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")})


def parse_address(address: str) -> Tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; ``PORT`` alone: 127.0.0.1) to ``(host, port)``.

    Raises:
        ValueError: not such an address.
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", address
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"dashboard address {address!r} is not HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"dashboard address {address!r}: no such port")
    return host.strip("[]") or "127.0.0.1", number


def _asset(name: str) -> bytes:
    static = importlib.resources.files("fiber.dashboard").joinpath("static")
    return static.joinpath(name).read_bytes()


class Dashboard:
    """The dashboard's HTTP server, serving the snapshots of ``source`` (see the module).

    ``token``: the one to ask for (None: a new random one). ``stacks``: a job's stacks
    by its name (None: not known here).
    """

    def __init__(self, source: Source, address: str = "127.0.0.1:0",
                 token: Optional[str] = None, stacks: Optional[Stacks] = None) -> None:
        host, port = parse_address(address)
        self.token = token or secrets.token_urlsafe(24)
        self._source = source
        self._lock = threading.Lock()
        #: rows shown -> (when, snapshot)
        self._cached: Dict[Optional[_inspect.Rows], Tuple[float, Dict[str, Any]]] = {}
        self.stacks = stacks
        handler = type("Handler", (_Handler,), {"dashboard": self})
        self._httpd = http.server.ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        bound_host, bound_port = self._httpd.server_address[:2]
        if isinstance(bound_host, bytes):
            bound_host = bound_host.decode()
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        #: ``http://HOST:PORT``, without the token.
        self.address = f"http://{shown}:{bound_port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="fiber-dashboard", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The address with its token: what to open in a browser."""
        return f"{self.address}/?token={self.token}"

    def snapshot(self, rows: Optional[_inspect.Rows] = None) -> Dict[str, Any]:
        """What the page shows now: the program's pools, processes and warnings, with
        ``rows`` (``(first, count)``; None: all) of each pool's worker table, and every
        worker counted (see `page`). One snapshot of each ``rows`` serves every request
        of the next `CACHE_S` seconds (the page's, another tab's, a Prometheus scrape),
        so that many viewers cost what one does. `COUNTS_ONLY` (/metrics': no row, only the
        counts, which every snapshot has) is served by any of them: a browser's poll
        and a scrape that follows it cost one snapshot."""
        with self._lock:
            now = time.monotonic()
            # the stale ones go: every page a viewer turned to would otherwise stay
            self._cached = {k: v for k, v in self._cached.items() if now - v[0] < CACHE_S}
            cached = self._cached.get(rows)
            if cached is None and rows == COUNTS_ONLY and self._cached:
                cached = max(self._cached.values(), key=lambda entry: entry[0])
            if cached is None:
                with _inspect.rows_shown(rows):
                    cached = self._cached[rows] = (now, page(self._source(), rows))
            return cached[1]

    def close(self) -> None:
        """Stop serving (open requests end)."""
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    dashboard: Dashboard
    server_version = "fiber-dashboard"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's
        pass  # no line per request on the program's stderr

    def _token_given(self, query: Dict[str, Any]) -> Tuple[str, bool]:
        """The token the request carries, and whether it came in the query (a first
        visit: the cookie is set then)."""
        if "token" in query:
            return query["token"][-1], True
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer "):].strip(), False
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == _COOKIE:
                return value, False
        return "", False

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        given, in_query = self._token_given(query)
        if not hmac.compare_digest(given.encode(), self.dashboard.token.encode()):
            self._send(403, _refusal(given), "text/plain; charset=utf-8")
            return
        cookie = in_query and url.path == "/"
        try:
            if url.path in _ASSETS:
                name, kind = _ASSETS[url.path]
                self._send(200, _asset(name), kind, cookie)
            elif url.path == "/api/snapshot":
                rows = _rows_asked(query.get("workers", [""])[-1])
                body = _json(self.dashboard.snapshot(rows)).encode()
                self._send(200, body, "application/json")
            elif url.path == "/api/stack":
                self._stack(query.get("worker", [""])[-1])
            elif url.path == "/metrics":
                body = _metrics.render(self.dashboard.snapshot(COUNTS_ONLY)).encode()
                self._send(200, body, _metrics.CONTENT_TYPE)
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except Exception as e:  # the program's state could not be read: say so, go on
            self._send(503, f"fiber dashboard: {type(e).__name__}: {e}\n".encode(),
                       "text/plain; charset=utf-8")

    def _stack(self, name: str) -> None:
        text = "text/plain; charset=utf-8"
        if self.dashboard.stacks is None:
            self._send(501, b"stacks are shown by a program's own dashboard "
                       b"(fiber.init(dashboard=...)), not an attached one\n", text)
            return
        try:
            self._send(200, self.dashboard.stacks(name).encode(), text)
        except LookupError as e:
            self._send(404, f"{e}\n".encode(), text)
        except TimeoutError as e:
            self._send(504, f"{e}\n".encode(), text)

    def _send(self, code: int, body: bytes, kind: str, cookie: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if cookie:
            self.send_header("Set-Cookie", f"{_COOKIE}={self.dashboard.token}; HttpOnly; "
                             "SameSite=Strict; Path=/")
        self.end_headers()
        self.wfile.write(body)


def _refusal(given: str) -> bytes:
    """Why a request is refused: it carried no token, or another one (an address from an
    earlier run: each start of a dashboard makes a new token)."""
    if not given:
        return (b"fiber dashboard: no token given: open the address fiber printed, with its "
                b"?token=... (or send Authorization: Bearer TOKEN)\n")
    return (b"fiber dashboard: wrong token: not this dashboard's (each start makes a new "
            b"one: open the address fiber printed this time, with its ?token=...)\n")


def _rows_asked(text: str) -> Optional[_inspect.Rows]:
    """``?workers=FIRST:COUNT`` (the page's: one page of each pool's worker table), or
    None (absent or not such: every row)."""
    first, sep, count = text.partition(":")
    try:
        return (max(0, int(first)), max(0, int(count))) if sep else None
    except ValueError:
        return None


def page(snap: Dict[str, Any], rows: Optional[_inspect.Rows]) -> Dict[str, Any]:
    """``snap`` with only ``rows`` of each pool's workers (None: all), and each pool's
    counts of every worker (``workers_total``, ``worker_states``, ``restarts``,
    ``workers_from``). A program's own snapshot comes so already (its pools build only
    those rows); an attached dashboard's (``fiber top``'s, with every row) is cut here.
    The processes (a pool's workers among them) are counted by state
    (``process_states``, ``processes_total``) and, with ``rows``, only the first
    ``rows[1]`` are kept: a program's own come so, an attached program's come counted
    with every row, an older fiber's uncounted."""
    procs = snap.get("processes")
    if isinstance(procs, list):
        if "process_states" not in snap:
            snap.update(processes_total=len(procs), process_states=_by_state(procs))
        if rows is not None and len(procs) > rows[1]:
            snap["processes"] = procs[:rows[1]]
    for pool in snap.get("pools", []):
        workers = pool.get("workers")
        if not isinstance(workers, list) or "worker_states" in pool:
            continue
        pool.update(workers_total=len(workers), worker_states=_by_state(workers),
                    workers_from=0,
                    restarts=sum(w["restarts"] for w in workers))
        if rows is not None:
            pool["workers_from"] = first = min(rows[0], len(workers))
            pool["workers"] = workers[first:first + rows[1]]
    return snap


def _by_state(rows: List[Dict[str, Any]]) -> Dict[str, int]:
    """How many of ``rows`` (workers', processes') are in each state."""
    return dict(collections.Counter(str(row.get("state", "unknown")) for row in rows))


def start(source: Source, address: str, token: Optional[str] = None,
          stacks: Optional[Stacks] = None) -> Dashboard:
    """Serve ``source``'s snapshots at ``address`` and say where on stderr.

    Raises:
        OSError: the address cannot be bound. ValueError: it is not ``HOST:PORT``.
    """
    board = Dashboard(source, address, token, stacks)
    sys.stderr.write(f"fiber: dashboard at {board.url}\n")
    host, port = parse_address(address)
    if not _loopback(host):  # its page and token travel in the clear (see docs/tls.md)
        sys.stderr.write(f"fiber: the dashboard's page is plain HTTP, its token in the clear "
                         f"on the network; on a network you do not trust, serve it on "
                         f"127.0.0.1 and reach it with ssh -L {port}:127.0.0.1:{port} "
                         f"<this host>\n")
    sys.stderr.flush()
    return board


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _json(value: Any) -> str:
    """``value`` as compact JSON, its long lists (a pool's workers, its task stream)
    encoded `_inspect.SLICE` items at a time, with a short sleep between two slices now
    and then (see `fiber._core._inspect.pause`: one ``json.dumps`` of a 1,024-worker
    snapshot holds the GIL for ~10 ms, which the program's hub then waits for)."""
    parts: List[str] = []
    with _inspect.viewing():
        _encode(value, parts)
    return "".join(parts)


def _encode(value: Any, parts: List[str]) -> None:
    if isinstance(value, dict):
        parts.append("{")
        for i, (key, item) in enumerate(value.items()):
            parts.append(("," if i else "") + json.dumps(str(key)) + ":")
            _encode(item, parts)
        parts.append("}")
    elif isinstance(value, list) and len(value) > _inspect.SLICE:
        parts.append("[")
        for start in range(0, len(value), _inspect.SLICE):
            if start:
                parts.append(",")
                _inspect.pause()
            part = value[start:start + _inspect.SLICE]
            parts.append(_ENCODER.encode(part)[1:-1])
        parts.append("]")
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        parts.append("[")  # a few tables (the pools), whose own long lists are sliced
        for i, item in enumerate(value):
            if i:
                parts.append(",")
            _encode(item, parts)
        parts.append("]")
    else:
        parts.append(_ENCODER.encode(value))


#: Compact JSON, anything else as its ``str`` (made once: ``json.dumps`` with options
#: makes an encoder a call, and a snapshot is encoded in a hundred calls)
_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"))


def _program_snapshot() -> Dict[str, Any]:
    """This program's snapshot, each worker with its job's last CPU and memory report,
    and its live jobs as their clusters see them (pending in the queue, running)."""
    snap = _inspect.snapshot(viewer=True)
    usage = _inspected.stats({w.get("name") for p in snap.get("pools", [])
                              for w in p.get("workers", [])})
    for pool in snap.get("pools", []):
        for worker in pool.get("workers", []):
            worker.update(usage.get(worker.get("name"), {}))
    snap["cluster"] = _cluster_view.jobs()
    return snap


def serve_program(address: str) -> Dashboard:
    """This program's own dashboard at ``address`` (the config's ``dashboard``: its main
    process calls this when it starts its hub); one a process.

    Raises:
        ConfigError: ``address`` cannot be served (taken, not this host's).
    """
    api = here.api
    if api.dashboard_served is None:
        _inspected.register()  # the jobs answer it (their stacks, CPU and memory)
        try:
            api.dashboard_served = start(_program_snapshot, address,
                                           stacks=_inspected.stack_of)
        except (OSError, ValueError) as e:
            raise ConfigError("dashboard", f"cannot serve at {address!r}: {e}") from e
    return api.dashboard_served
