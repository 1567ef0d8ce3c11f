"""Run inside a fresh network namespace (``unshare -n``): how a connect meets a route that
is missing for a moment (30 s allowed), one missing for good (4 s allowed), and a port
nobody listens on."""

import errno
import json
import socket
import subprocess
import threading
import time

from fiber.transport.sockets import connect


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def attempt(address: str, timeout: float) -> dict:
    t = time.monotonic()
    try:
        connect(address, timeout).close()
        outcome = "connected"
    except OSError as e:
        outcome = errno.errorcode.get(e.errno or 0, str(e))
    return {"outcome": outcome, "seconds": time.monotonic() - t}


ip("link", "set", "lo", "up")
listener = socket.socket()
listener.bind(("0.0.0.0", 0))
listener.listen()
port = listener.getsockname()[1]
ip("route", "add", "unreachable", "10.99.0.1/32")
result = {"for_good": attempt(f"tcp://10.99.0.1:{port}", 4.0)}


def route_appears() -> None:
    time.sleep(1.0)
    ip("route", "del", "unreachable", "10.99.0.1/32")
    ip("addr", "add", "10.99.0.1/32", "dev", "lo")


threading.Thread(target=route_appears).start()
result["for_a_moment"] = attempt(f"tcp://10.99.0.1:{port}", 30.0)
listener.close()
result["refused"] = attempt(f"tcp://127.0.0.1:{port}", 30.0)
print("RESULT " + json.dumps(result))
