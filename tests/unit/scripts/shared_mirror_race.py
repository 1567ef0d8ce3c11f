"""Two threads of one process resolve the same `fiber.shared` handle of another host
while the publisher answers the first thread's fetch with "holder" (another process of
this host holds a copy): the second thread, parked on the first's mirror, must get the
data too. Run by tests/unit/test_shared_mirror.py; prints a JSON line.

    python shared_mirror_race.py            the reader (starts the publisher)
    python shared_mirror_race.py publish    the publisher
"""

import json
import os
import subprocess
import sys
import threading
import time


def publish() -> None:
    """A store that says it is on another host, one object, and a holder registered for
    the reader's host (a process that is not there: its address refuses)."""
    from fiber._core import _runtime, _shared

    hub = _runtime.hub()
    store = hub.ensure(_shared.SERVICE, _shared.SharedStore,
                       lambda: _shared.SharedStore("another-host"))
    handle = _shared.share(b"x" * 100)
    with hub.lock:
        store.entries[handle.key].holders[_shared.host_key()] = (b"p" * 16, "tcp://127.0.0.1:9")
    print(handle.address, handle.key.hex(), flush=True)
    sys.stdin.read()  # until the reader is done


def read() -> None:
    env = {**os.environ, "FIBER_SECRET": os.urandom(16).hex()}
    os.environ["FIBER_SECRET"] = env["FIBER_SECRET"]
    pub = subprocess.Popen([sys.executable, __file__, "publish"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env)
    assert pub.stdout is not None
    address, key = pub.stdout.readline().split()
    from fiber._core import _shared

    real = _shared._request

    def slow(address_: str, key_: bytes, offer: str = "") -> object:
        if offer:  # the first thread's fetch takes a while (a far host)
            time.sleep(1.0)
        return real(address_, key_, offer)

    _shared._request = slow
    out = {}

    def resolve(name: str) -> None:
        try:
            data = _shared._resolve(address, bytes.fromhex(key), "another-host")
            out[name] = bytes(data[:4]).decode()
        except BaseException as e:
            out[name] = repr(e)

    threads = [threading.Thread(target=resolve, args=(n,), daemon=True) for n in "AB"]
    threads[0].start()
    time.sleep(0.3)  # B asks while A's fetch is on its way: B waits for A's mirror
    threads[1].start()
    for t in threads:
        t.join(15)
    print(json.dumps({"done": [not t.is_alive() for t in threads], "got": out}), flush=True)
    pub.kill()
    os._exit(0)


if __name__ == "__main__":
    publish() if sys.argv[1:] == ["publish"] else read()
