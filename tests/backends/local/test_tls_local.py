"""``tls = "auto"`` on the local backend: its jobs reach the master over this host's own
network, so their connections stay plain and the program makes no TLS credentials
(making them costs its start 0.1-0.3 s); with ``on`` it makes them and its jobs inherit
them; with ``off`` its jobs are told off (their own default, auto, would speak TLS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_PROGRAM = textwrap.dedent("""
    import json, sys
    import fiber
    from fiber._process_state import here

    def child_state():
        from fiber._process_state import here
        from fiber.transport import tls
        policy = tls.policy()
        return (policy.mode if policy else "off",
                here.transport.tls_credentials is not None)

    if __name__ == "__main__":
        with fiber.Pool(2) as pool:
            child = pool.apply(child_state)
        q = fiber.SimpleQueue()
        print("RESULT " + json.dumps({
            "made": here.transport.tls_credentials is not None,
            "cryptography": "cryptography" in sys.modules,
            "child_mode": child[0], "child_has": child[1]}), flush=True)
""")


@pytest.mark.parametrize("mode, made", [("auto", False), ("on", True), ("off", False)])
def test_local_jobs_under_auto_take_no_credentials(tmp_path, mode: str, made: bool) -> None:
    script = tmp_path / "prog.py"
    script.write_text(_PROGRAM)
    env = dict(os.environ, FIBER_TLS=mode, FIBER_BACKEND="local")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr
    result = json.loads(lines[-1][7:])
    assert result == {"made": made, "cryptography": made, "child_mode": mode,
                      "child_has": made}, result
