"""fiber's pytest plugin (entry point ``pytest11``) gives a test session of anyone who installs
fiber its option ``--fiber-backend`` and nothing else: the conformance suite's fixtures and
its autouse leak check apply to the suite's own tests alone."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any, List

SUITE_FIXTURES = re.compile(r"^(no_leaks|ctx|backend_name|mp_pool)\b", re.MULTILINE)


def _pytest(tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    argv: List[str] = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(argv, cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_session_of_someone_elses_tests_gets_the_option_only(tmp_path: Any) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_mine.py").write_text(
        "def test_mine(request):\n"
        "    assert 'no_leaks' not in request.fixturenames\n")
    ran = _pytest(tmp_path, "-q")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
    fixtures = _pytest(tmp_path, "--fixtures")
    assert fixtures.returncode == 0, fixtures.stderr
    assert not SUITE_FIXTURES.findall(fixtures.stdout), fixtures.stdout
    usage = _pytest(tmp_path, "--help")
    assert "--fiber-backend=NAME" in usage.stdout, usage.stdout
