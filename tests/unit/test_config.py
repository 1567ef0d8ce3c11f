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


#: (key, a wrong value, what the error says is expected): a key of each type, the core's
#: and a backend's.
BAD_VALUES = [
    ("heartbeat_timeout", "abc", "expected a number (float), got 'abc'"),
    ("cpu_per_job", "two", "expected a number (float), got 'two'"),
    ("pool_prefetch", "many", "expected a whole number (int), got 'many'"),
    ("listen_port", "80.5", "expected a whole number (int), got '80.5'"),
    ("debug", "maybe", "expected a boolean (true or false, 1 or 0, yes or no, on or off), "
                       "got 'maybe'"),
    ("log_level", "loud", "must be one of debug, info, warning, error, critical, got 'loud'"),
    ("heartbeat_timeout", "-1", "must be positive, got -1.0"),
    ("spin_us", "-200", "must not be negative, got -200"),
    ("ssh_connect_timeout", "ten", "expected a whole number (int), got 'ten'"),
    ("docker_timeout", "soon", "expected a number (float), got 'soon'"),
    ("local_fork_server", "perhaps", "expected a boolean (true or false, 1 or 0, yes or no, "
                                     "on or off), got 'perhaps'"),
    ("ssh_connect_timeout", "0", "connect_timeout must be a whole number of at least 1, got 0"),
]


@pytest.mark.parametrize("key,value,expected", BAD_VALUES)
def test_a_wrong_value_says_what_is_expected_and_where_it_was_set(tmp_path, key, value,
                                                                   expected):
    """``FIBER_HEARTBEAT_TIMEOUT=abc`` listed every valid key, as if the key were unknown:
    a wrong value of a valid key says what the key expects, what was given, and where
    (the variable, the file, ``fiber.init``), and no list of keys."""
    variable = f"FIBER_{key.upper()}"
    path = tmp_path / ".fiberconfig"
    path.write_text(f"[fiber]\n{key} = {value}\n")
    for where, kwargs in [(variable, {"environ": {variable: value}}),
                          (str(path), {"config_file": str(path)}),
                          ("fiber.init", {"explicit": {key: value}})]:
        args = {"explicit": {}, "environ": {}, "config_file": str(tmp_path / "none"), **kwargs}
        with pytest.raises(ConfigError) as err:
            resolve(**args)
        assert str(err.value) == f"fiber config {key!r} (from {where}): {expected}"
        assert err.value.key == key and err.value.where == where


@pytest.mark.parametrize("kwargs,expected", [
    ({"heartbeat_timeout": "abc"}, "expected a number (float), got 'abc'"),
    ({"debug": 2}, "expected a boolean (true or false, 1 or 0, yes or no, on or off), got 2"),
    ({"listen_port": True}, "expected a whole number (int), got True"),
    ({"image": 3}, "expected a string (str), got 3"),
    ({"log_level": 5}, "must be one of debug, info, warning, error, critical, got '5'"),
])
def test_a_wrong_value_in_init_says_so_and_changes_nothing(kwargs, expected):
    before = fiber.get_config()
    with pytest.raises(ConfigError) as err:
        fiber.init(**kwargs)
    assert str(err.value) == f"fiber config {next(iter(kwargs))!r} (from fiber.init): {expected}"
    assert fiber.get_config() == before


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


@pytest.mark.parametrize("value,problem", [
    ("256.1.1.1", "'256.1.1.1' is not an IPv4 address (Octet 256 (> 255) not permitted in "
                  "'256.1.1.1')"),
    ("10.0.1", "'10.0.1' is not an IPv4 address (Expected 4 octets in '10.0.1')"),
    ("10.0.0.5:4242", "'10.0.0.5:4242' is not an IP address: listen_host takes no port "
                      "(listen_port sets it)"),
    ("[::1]", "'[::1]' is not an IP address: write an IPv6 address without brackets"),
    ("fe80::zz", "'fe80::zz' is not an IPv6 address"),
    ("node 1", "'node 1' is neither an IP address nor a host name (letters, digits, '-' and "
               "'_' in labels separated by dots)"),
    ("lo", "'lo' is a network interface of this host, not an address: give the interface's "
           "address (ip -brief address show lo)"),
])
def test_a_listen_host_that_is_no_address_is_refused_when_read(tmp_path, value, problem):
    """``listen_host=256.1.1.1`` was accepted when read and failed at ``Pool()`` (the hub
    could not listen there)."""
    with pytest.raises(ConfigError) as err:
        resolve({}, environ={"FIBER_LISTEN_HOST": value}, config_file=os.devnull)
    assert str(err.value).startswith(
        f"fiber config 'listen_host' (from FIBER_LISTEN_HOST): {problem}"), str(err.value)
    with pytest.raises(ConfigError, match=r"\(from fiber.init\)"):
        fiber.init(listen_host=value)


@pytest.mark.parametrize("value", ["", "127.0.0.1", "0.0.0.0", "::1", "fe80::1%lo",
                                   "localhost", "node-1.cluster.local", "my_service"])
def test_a_listen_host_may_be_an_address_or_a_host_name(value):
    assert resolve({"listen_host": value}, environ={}, config_file=os.devnull).listen_host \
        == value
