"""What a template imports before it forks (`fiber._preload`): the local fork
server's ``local_preload`` and a job of several pool workers' ``pool_preload``."""

from __future__ import annotations

import sys
import threading
from typing import Any

from fiber import _preload


def test_auto_preload_names_site_packages_of_the_master() -> None:
    import cloudpickle  # noqa: F401  (a dependency of fiber, from site-packages)

    names = _preload.auto_preload()
    assert "cloudpickle" in names
    assert "fiber" not in names and "os" not in names and "pytest" not in names
    assert _preload.preload_modules("") == []
    assert _preload.preload_modules(" a, b.c ,") == ["a", "b.c"]
    assert "cloudpickle" in _preload.preload_modules("AUTO")


def _module(tmp_path: Any, monkeypatch: Any, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_module_that_fails_is_kept_and_the_next_imported(tmp_path, monkeypatch) -> None:
    _module(tmp_path, monkeypatch, "fiber_preload_broken", "raise RuntimeError('no GPU')\n")
    _module(tmp_path, monkeypatch, "fiber_preload_fine", "VALUE = 7\n")
    imported, failed, threaded = _preload.import_modules(
        ["fiber_preload_broken", "fiber_preload_missing_xyz", "fiber_preload_fine"])
    assert imported == ["fiber_preload_fine"] and threaded == ""
    assert failed["fiber_preload_broken"] == "RuntimeError: no GPU"
    assert failed["fiber_preload_missing_xyz"].startswith("ModuleNotFoundError")
    assert sys.modules["fiber_preload_fine"].VALUE == 7


def test_importing_stops_at_a_module_that_starts_a_thread(tmp_path, monkeypatch) -> None:
    """A template that forks must hold no thread its children lack: the module that
    started one is named, and the modules after it are not imported."""
    stop = threading.Event()
    monkeypatch.setattr(threading, "fiber_test_stop", stop, raising=False)
    _module(tmp_path, monkeypatch, "fiber_preload_threaded",
            "import threading\n"
            "threading.Thread(target=threading.fiber_test_stop.wait, daemon=True).start()\n")
    _module(tmp_path, monkeypatch, "fiber_preload_after", "VALUE = 1\n")
    try:
        imported, failed, threaded = _preload.import_modules(
            ["fiber_preload_threaded", "fiber_preload_after"])
    finally:
        stop.set()
    assert threaded == "fiber_preload_threaded" and failed == {}
    assert imported == ["fiber_preload_threaded"]
    assert "fiber_preload_after" not in sys.modules
