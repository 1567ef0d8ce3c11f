"""Configuration: sources, precedence, types, errors, and travel to children."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

import fiber
from fiber.config import Config, override, resolve
from fiber.errors import ConfigError


def test_defaults(tmp_path):
    cfg = resolve({}, environ={}, config_file=str(tmp_path / "none"))
    assert cfg == Config()
    assert cfg.backend == "local"


def test_environment_strings_are_converted(tmp_path):
    env = {"FIBER_DEBUG": "false", "FIBER_POOL_PREFETCH": "5", "FIBER_HEARTBEAT_TIMEOUT": "2.5"}
    cfg = resolve({}, environ=env, config_file=str(tmp_path / "none"))
    assert cfg.debug is False and cfg.pool_prefetch == 5 and cfg.heartbeat_timeout == 2.5
    cfg = resolve({}, environ={"FIBER_DEBUG": "Yes"}, config_file=str(tmp_path / "none"))
    assert cfg.debug is True


@pytest.mark.parametrize("env,key", [
    ({"FIBER_POOL_PREFETCH": "many"}, "pool_prefetch"),
    ({"FIBER_DEBUG": "maybe"}, "debug"),
    ({"FIBER_HEARTBEAT_TIMEOUT": "-1"}, "heartbeat_timeout"),
    ({"FIBER_SPIN_US": "-200"}, "spin_us"),
])
def test_bad_value_names_key_and_valid_keys(tmp_path, env, key):
    with pytest.raises(ConfigError) as err:
        resolve({}, environ=env, config_file=str(tmp_path / "none"))
    assert key in str(err.value)


def test_unknown_key_lists_valid_ones():
    with pytest.raises(ConfigError) as err:
        fiber.init(backnd="slurm")
    msg = str(err.value)
    assert "backnd" in msg and "backend" in msg and "listen_host" in msg
    assert isinstance(err.value, ValueError)


def test_unknown_key_in_file(tmp_path):
    path = tmp_path / ".fiberconfig"
    path.write_text("backend = local\ncolour = blue\n")
    with pytest.raises(ConfigError, match="colour"):
        resolve({}, environ={}, config_file=str(path))


def test_precedence_code_over_env_over_file(tmp_path):
    path = tmp_path / ".fiberconfig"
    path.write_text("[fiber]\npool_prefetch = 7\nimage = from-file\ndebug = true\n")
    env = {"FIBER_POOL_PREFETCH": "8", "FIBER_IMAGE": "from-env"}
    cfg = resolve({"pool_prefetch": 9}, environ=env, config_file=str(path))
    assert cfg.pool_prefetch == 9      # code
    assert cfg.image == "from-env"     # environment over file
    assert cfg.debug is True           # file over default


def test_file_in_working_directory_is_read(tmp_path):
    (tmp_path / ".fiberconfig").write_text("pool_max_task_retries = 11\n")
    code = "import fiber; print(fiber.get_config().pool_max_task_retries)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": ""})
    assert out.stdout.strip() == "11", out.stderr


def test_override_restores():
    before = fiber.get_config()
    with override(pool_prefetch=42) as cfg:
        assert cfg.pool_prefetch == 42 == fiber.get_config().pool_prefetch
    assert fiber.get_config() == before


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        fiber.get_config().backend = "x"  # type: ignore[misc]


def test_import_has_no_side_effects(tmp_path):
    code = (
        "import logging, os, sys, threading\n"
        "before = set(os.listdir('.'))\n"
        "import fiber\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "assert set(os.listdir('.')) == before\n"
        "assert not logging.getLogger().handlers and not logging.getLogger('fiber').handlers\n"
        "assert 'FIBER_SECRET' in os.environ\n"
        "import fiber._core._runtime as r; assert r.hub_if_started() is None\n"
        "print('clean')\n"
    )
    env = {**os.environ, "FIBER_SECRET": "ab" * 32, "FIBER_BACKEND": "no-such-backend"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.stdout.strip() == "clean", out.stderr
