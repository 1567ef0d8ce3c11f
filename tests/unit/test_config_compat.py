"""Configuration written for the original fiber, and errors a person can act on: unknown
keys, backends and command-line options get a did-you-mean; an unreadable or binary
``.fiberconfig`` is named with its problem; stray ``FIBER_*`` variables are warned about."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

import fiber
import fiber.config
from fiber._process_state import here
from fiber.config import Config, resolve
from fiber.errors import ConfigError, UnknownBackendError


def _quiet_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}


def _run(code: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**_quiet_env(), **(env or {})})


@pytest.mark.parametrize("old,new,value,expected", [
    ("default_backend", "backend", "local", "local"),
    ("default_image", "image", "my-image", "my-image"),
    ("mem_per_job", "memory_per_job_mb", "512", 512),
    ("ipc_admin_master_port", "listen_port", "5123", 5123),
    ("log_level", "log_level", "10", "debug"),
])
def test_the_original_fibers_keys_are_read_as_ours_with_a_warning(tmp_path, old, new, value,
                                                                     expected):
    path = tmp_path / ".fiberconfig"
    path.write_text(f"[default]\n{old} = {value}\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here.api.compat_warned.clear()
        cfg = resolve({}, environ={}, config_file=str(path))
    assert getattr(cfg, new) == expected
    if old != new:
        assert any(issubclass(w.category, FutureWarning) and repr(old) in str(w.message)
                   and repr(new) in str(w.message) for w in caught), [str(w.message)
                                                                     for w in caught]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_the_new_key_wins_over_its_old_name_in_one_source(tmp_path):
    cfg = resolve({"default_image": "old", "image": "new"}, environ={},
                  config_file=str(tmp_path / "none"))
    assert cfg.image == "new"


def test_keys_without_effect_are_accepted_with_a_warning(tmp_path):
    here.api.compat_warned.clear()
    with pytest.warns(FutureWarning, match="'use_push_queue'.*has no effect"):
        cfg = resolve({"use_push_queue": True}, environ={}, config_file=str(tmp_path / "x"))
    assert cfg == Config()


def test_the_original_fibers_environment_variables_choose_the_backend(tmp_path):
    """Its own scripts set FIBER_DEFAULT_BACKEND: it was silently ignored (the job ran on
    local); it now selects the backend (checked with a backend that does not exist, so
    that the choice shows)."""
    out = _run("import fiber\nprint(fiber.get_config().backend)", tmp_path,
               {"FIBER_DEFAULT_BACKEND": "docker"})
    assert out.stdout.strip() == "docker", out.stderr
    assert "FIBER_DEFAULT_BACKEND" not in out.stderr  # the variable is known...
    assert "'default_backend'" in out.stderr and "'backend'" in out.stderr  # ...and renamed


def test_assigning_fiber_config_attributes_sets_the_config():
    before = fiber.get_config()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fiber.config.pool_prefetch = 13
            assert fiber.get_config().pool_prefetch == 13
            assert fiber.config.pool_prefetch == 13
            fiber.config.default_image = "img"
            assert fiber.get_config().image == "img"
        with pytest.raises(ConfigError, match="pool_prefetch"):
            fiber.config.pool_prefetch = "many"
    finally:
        fiber.config.install(before)


def test_get_dict_load_and_reset(tmp_path):
    path = tmp_path / "other.ini"
    path.write_text("[fiber]\npool_max_task_retries = 9\n")
    assert fiber.config.load(str(path)).pool_max_task_retries == 9
    assert fiber.config.get_dict()["backend"] == fiber.get_config().backend
    code = ("import fiber\nfiber.init(pool_prefetch=21)\n"
            "print(fiber.get_config().pool_prefetch, fiber.reset().pool_prefetch)")
    out = _run(code, tmp_path)
    assert out.stdout.split() == ["21", "2"], out.stderr


def test_the_original_fibers_config_from_a_file(tmp_path):
    """Issue 32, the original's test_config.py (test_config_file, test_invalid_key):
    ``Config(conf_file=path)`` is the config of that file, its keys read back under the
    original's names too; an unknown key raises ValueError (ConfigError)."""
    path = tmp_path / "demo_config"
    path.write_text("[default]\nimage=demo-image:latest\nipc_active=False\n"
                    "mem_per_job=12345\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        config = Config(conf_file=str(path))
        assert config.image == "demo-image:latest"
        assert (config.ipc_active, config.mem_per_job) == (False, 12345)
        assert (config.ipc_admin_master_port, config.ipc_admin_worker_port) == (0, 8000)
        fiber.init(ipc_active=None)  # the original's default again, for the next tests
    path.write_text("[default]\nthis_key_does_not_exist=yes\n")
    with pytest.raises(ValueError, match="this_key_does_not_exist"):
        Config(conf_file=str(path))
    with pytest.raises(TypeError, match="no other argument"):
        Config(image="x", conf_file=str(path))


def test_init_with_an_unknown_backend_fails_at_once():
    """Issue 32: the original's ``init(backend="nope")`` failed at init; so does it here,
    naming the known backends, and the config in force is unchanged."""
    before = fiber.get_config()
    with pytest.raises(ConfigError, match=r"unknown backend 'slrum' \(did you mean 'slurm'"):
        fiber.init(backend="slrum")
    with pytest.raises(ConfigError, match="known backends: .*local"):
        fiber.init(backend="nope")
    assert fiber.get_config() == before


def test_backend_names_are_case_insensitive_in_every_source(tmp_path):
    """``FIBER_BACKEND=LOCAL`` was accepted when read and failed at ``Pool()``: a name is
    read in any case, as a log level is, and stands as the backend's own."""
    path = tmp_path / ".fiberconfig"
    path.write_text("[fiber]\nbackend = Slurm\n[fiber.SLURM]\npartition = gpu\n")
    cfg = resolve({}, environ={}, config_file=str(path))
    assert cfg.backend == "slurm" and cfg.backends == {"slurm": {"partition": "gpu"}}
    assert resolve({}, environ={"FIBER_BACKEND": "LOCAL"}, config_file=os.devnull).backend \
        == "local"
    try:
        assert fiber.init(backend="Slurm").backend == "slurm"
        fiber.config.backend = "LOCAL"
        assert fiber.config.backend == "local"
    finally:
        fiber.init(backend=None)
    assert fiber.get_context("LOCAL") is fiber.get_context("local")
    assert fiber.get_context("Local").get_start_method() == "local"


@pytest.mark.parametrize("source", ["environment", "file", "init"])
def test_an_unknown_backend_is_refused_when_read_with_a_suggestion(tmp_path, source):
    """Only ``fiber.init`` checked the name: one from the environment or ``.fiberconfig``
    failed at ``Pool()``, without the did-you-mean."""
    path = tmp_path / ".fiberconfig"
    path.write_text("backend = SLRUM\n")
    args = {"environment": ({}, {"FIBER_BACKEND": "SLRUM"}, os.devnull),
            "file": ({}, {}, str(path)), "init": ({"backend": "SLRUM"}, {}, os.devnull)}
    with pytest.raises(ConfigError) as err:
        resolve(*args[source])
    where = {"environment": "FIBER_BACKEND", "file": str(path), "init": "fiber.init"}[source]
    assert str(err.value).startswith(
        f"fiber config 'backend' (from {where}): unknown backend 'SLRUM' (did you mean "
        "'slurm'?); known backends: "), str(err.value)
    assert "local" in str(err.value)


def test_a_pool_runs_on_a_backend_named_in_capitals(tmp_path):
    out = _run("import fiber\n"
               "if __name__ == '__main__':\n"
               "    with fiber.Pool(1) as pool:\n"
               "        print(fiber.get_config().backend, pool.map(abs, [-1, -2]))\n",
               tmp_path, {"FIBER_BACKEND": "LOCAL"})
    assert (out.returncode, out.stdout) == (0, "local [1, 2]\n"), out.stderr


_PLUGIN = """
import dataclasses
from fiber.backends.local import LocalBackend


@dataclasses.dataclass(frozen=True)
class ZoneSettings:
    zone: str = ""


class MyCluster(LocalBackend):
    name = "MyCluster"
    settings = ZoneSettings
"""


def test_a_third_party_backend_is_named_in_any_case(tmp_path):
    """A backend installed by its entry point under a name in mixed case (``MyCluster``):
    ``FIBER_BACKEND=mycluster``, ``get_context("MYCLUSTER")`` and its own variables
    (``FIBER_MYCLUSTER_ZONE``, read as lower case, as every ``FIBER_*`` variable is)."""
    site = tmp_path / "site"
    (site / "mycluster-1.0.dist-info").mkdir(parents=True)
    (site / "mycluster-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mycluster\nVersion: 1.0\n")
    (site / "mycluster-1.0.dist-info" / "entry_points.txt").write_text(
        "[fiber.backends]\nMyCluster = mycluster:MyCluster\n")
    (site / "mycluster.py").write_text(_PLUGIN)
    code = ("import fiber, fiber.config\n"
            "from mycluster import ZoneSettings\n"
            "if __name__ == '__main__':\n"
            "    print(fiber.get_config().backend)\n"
            "    print(fiber.config.settings(ZoneSettings, 'MyCluster').zone)\n"
            "    ctx = fiber.get_context('MYCLUSTER')\n"
            "    print(ctx.get_start_method())\n"
            "    with ctx.Pool(1) as pool:\n"
            "        print(pool.map(abs, [-3]))\n")
    out = _run(code, tmp_path, {"PYTHONPATH": str(site), "FIBER_BACKEND": "mycluster",
                                "FIBER_MYCLUSTER_ZONE": "eu"})
    assert (out.returncode, out.stdout) == (0, "MyCluster\neu\nMyCluster\n[3]\n"), out.stderr
    assert "not a fiber setting" not in out.stderr, out.stderr


def test_an_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"did you mean 'backend'\?"):
        fiber.init(bakend="local")
    with pytest.raises(ConfigError, match=r"did you mean 'debug'\?"):
        resolve({"debgu": True}, environ={}, config_file=os.devnull)


def test_a_stray_fiber_variable_is_warned_about_with_a_suggestion(tmp_path):
    out = _run("import fiber\nfiber.get_config()\nprint('ok')", tmp_path,
               {"FIBER_BAKEND": "slurm", "FIBER_TEST_WHATEVER": "1", "FIBER_SECRET": "ab" * 32})
    assert out.stdout.strip() == "ok", out.stderr
    assert "FIBER_BAKEND is not a fiber setting (did you mean 'FIBER_BACKEND'?)" in out.stderr
    assert "FIBER_TEST_WHATEVER" not in out.stderr and "FIBER_SECRET" not in out.stderr


def test_an_unknown_backend_suggests_the_closest():
    with pytest.raises(UnknownBackendError, match=r"'slrum' \(did you mean 'slurm'\?\)"):
        fiber.get_context("slrum")


def test_the_test_only_netns_backend_is_not_offered_to_users(tmp_path):
    """A user's fresh process: the test suite registers netns in its own once a test
    imports fiber_ci.netns."""
    out = _run("from fiber.backends import known_backends\nprint(known_backends())", tmp_path)
    assert out.returncode == 0, out.stderr
    assert "'local'" in out.stdout and "'netns'" not in out.stdout


@pytest.mark.parametrize("content,problem", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "is not a text file"),
    (b"backend = local\x00\n", "NUL bytes"),
])
def test_a_binary_config_file_is_named_with_its_problem(tmp_path, content, problem):
    path = tmp_path / ".fiberconfig"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        resolve({}, environ={}, config_file=str(path))
    assert str(path) in str(err.value) and problem in str(err.value)


def test_an_unreadable_config_file_is_named_with_its_problem(tmp_path):
    path = tmp_path / ".fiberconfig"
    path.mkdir()  # a directory: unreadable as a file, also for root
    with pytest.raises(ConfigError) as err:
        resolve({}, environ={}, config_file=str(path))
    assert str(path) in str(err.value) and "cannot be read" in str(err.value)


def test_a_pool_of_a_non_int_size_raises_type_error_as_multiprocessing():
    import multiprocessing

    with pytest.raises(TypeError):
        multiprocessing.Pool("a")  # the reference behaviour
    with pytest.raises(TypeError, match="must be an int, not 'str'"):
        fiber.Pool("a")
    with pytest.raises(ValueError):
        fiber.Pool(0)


@pytest.mark.parametrize("argv,expected", [
    (["run", "--bakend", "local", "python", "-c", "1"], "did you mean '--backend'?"),
    (["rnu"], "did you mean 'run'?"),
    (["logs", "--tial", "3", "job"], "did you mean '--tail'?"),
])
def test_a_mistyped_command_line_suggests_the_closest(argv, expected, tmp_path):
    out = subprocess.run([sys.executable, "-m", "fiber", *argv], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2
    assert expected in out.stderr, out.stderr


def test_log_level_and_log_file_write_timestamped_lines_per_process(tmp_path):
    code = ("import fiber\n"
            "with fiber.Pool(1) as p:\n"
            "    assert p.map(abs, [-1]) == [1]\n")
    out = _run(code, tmp_path, {"FIBER_LOG_LEVEL": "debug",
                                "FIBER_LOG_FILE": str(tmp_path / "fiber.log")})
    assert out.returncode == 0, out.stderr
    main_log = (tmp_path / "fiber.log.MainProcess").read_text()
    first = main_log.splitlines()[0]
    assert first[:4].isdigit() and " fiber MainProcess[" in first and "DEBUG" in first, first
    assert "started PoolWorker-1" in main_log
    assert out.stderr == ""


def test_reading_the_original_fibers_keys_gives_their_values(tmp_path):
    """Issue 32: the original's tests read ``fiber.config.default_backend``; every key it
    knew reads back, with the warning its setting gets: a renamed key as its new one, a
    key without effect as set, or else as the original's default."""
    code = """
import warnings
warnings.simplefilter("always")
import fiber, fiber.config as c
fiber.init(backend="local", image="img:1")
print(c.default_backend, c.default_image, c.mem_per_job, c.ipc_admin_master_port)
print(c.merge_output, c.use_bash, c.ipc_active, c.ipc_admin_worker_port, c.use_push_queue)
c.use_push_queue = False
fiber.init(mem_per_job=512)
print(c.use_push_queue, c.mem_per_job)
try:
    c.no_such_key
except AttributeError as e:
    print("AttributeError", e)
"""
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "local img:1 None 0", out.stdout
    assert lines[1] == "False False True 8000 True", out.stdout
    assert lines[2] == "False 512", out.stdout
    assert lines[3].startswith("AttributeError") and "no_such_key" in lines[3]
    assert "'default_backend' (read) is the original fiber's name of 'backend'" in out.stderr
    assert "'merge_output' (read) of the original fiber has no effect here" in out.stderr


def test_the_original_fibers_spellings_are_accepted(tmp_path):
    """Issue 32: ``log_level=INFO`` (the original's own demo config), ``FIBER_LOG_LEVEL=
    DEBUG``, a key in mixed case in ``.fiberconfig`` (its configparser ignored case), and
    None (its defaults: ``init(backend=None)``) for "the default again"."""
    path = tmp_path / ".fiberconfig"
    path.write_text("[default]\nLog_Level = INFO\nBACKEND = local\n")
    cfg = resolve({}, environ={}, config_file=str(path))
    assert cfg.log_level == "info" and cfg.backend == "local"
    assert resolve({}, environ={"FIBER_LOG_LEVEL": "DEBUG"},
                   config_file=str(tmp_path / "none")).log_level == "debug"
    with pytest.raises(ConfigError, match="log_level"):
        resolve({}, environ={"FIBER_LOG_LEVEL": "LOUD"}, config_file=str(tmp_path / "none"))
    code = """
import fiber
fiber.init(log_level="WARNING", pool_prefetch=9)
print(fiber.get_config().log_level, fiber.get_config().pool_prefetch)
fiber.init(backend=None, pool_prefetch=None)
print(fiber.get_config().backend, fiber.get_config().pool_prefetch)
try:
    fiber.init(no_such_key=None)
except fiber.errors.ConfigError as e:
    print("ConfigError", e.key)
"""
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["warning 9", f"local {Config().pool_prefetch}",
                                    "ConfigError no_such_key"], \
        out.stdout


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_the_original_fibers_config_objects_and_backend_module(tmp_path, monkeypatch):
    """Issue 32: ``fiber.config.get_object()``, ``Config.from_dict`` (its keys read as
    everywhere) and ``fiber.backend`` (its ``examples/ring.py`` imports it) exist; inside
    a pod (``KUBERNETES_SERVICE_HOST``) the backend stays the configured one, on purpose
    (the migration guide says why)."""
    import fiber.backend

    cfg = Config.from_dict({"default_backend": "docker", "log_level": "INFO"})
    assert (cfg.backend, cfg.log_level) == ("docker", "info")
    assert fiber.config.from_dict({"pool_prefetch": "7"}).pool_prefetch == 7
    with pytest.raises(ConfigError, match="no_such_key"):
        Config.from_dict({"no_such_key": 1})
    assert fiber.config.get_object() is fiber.get_config()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with fiber.config.override(backend="local"):
        assert fiber.backend.auto_select_backend() == "kubernetes"  # the original's answer
        assert fiber.backend.get_backend().name == "local"
        assert fiber.backend.get_backend("local") is fiber.backend.get_backend()
    with pytest.raises(UnknownBackendError):
        fiber.backend.get_backend("nope")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert fiber.backend.auto_select_backend() == fiber.get_config().backend
    assert resolve({}, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
                   config_file=str(tmp_path / "none")).backend == "local"
