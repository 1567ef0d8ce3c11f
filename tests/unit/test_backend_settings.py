"""A backend declares its own configuration keys (``Backend.settings``): they are read
from ``fiber.init``, ``FIBER_<BACKEND>_<KEY>`` and ``[fiber.<backend>]`` of
``.fiberconfig``, checked as the core's are, and reach the backend through
``fiber.config.settings``; the core config names no backend (issue 28)."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import ClassVar, List, Sequence, Tuple

import pytest

import fiber
from fiber import config
from fiber.backends import Backend, JobHandle, JobSpec, get_backend, register_backend
from fiber.backends.kubernetes._settings import KubernetesSettings
from fiber.backends.slurm._settings import SlurmSettings
from fiber.errors import ConfigError, SubmitError


@dataclasses.dataclass(frozen=True)
class ToySettings:
    #: Where the toy cluster is.
    endpoint: str = "toy://default"
    #: How many retries.
    retries: int = 2

    variables: ClassVar[Tuple[str, ...]] = ("FIBER_TOY_INTERNAL",)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must not be negative, got {self.retries!r}")


class ToyBackend(Backend):
    """A third-party backend's declaration; it is never asked to run a job here."""

    name = "toy"
    settings = ToySettings

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        raise NotImplementedError

    def status(self, handles: Sequence[JobHandle]) -> dict:
        return {}

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        pass

    def listen_host(self) -> str:
        return "127.0.0.1"


@pytest.fixture(autouse=True)
def toy():
    register_backend("toy", ToyBackend)
    yield
    config.reset()


def test_a_backends_keys_come_from_code_environment_and_its_section(tmp_path, monkeypatch):
    (tmp_path / ".fiberconfig").write_text("[fiber.toy]\nendpoint = toy://file\n"
                                           "[fiber.slurm]\npartition = from-file\n")
    monkeypatch.chdir(tmp_path)
    cfg = config.resolve({}, environ={})
    assert config.settings(ToySettings, "toy", cfg) == ToySettings("toy://file", 2)
    cfg = config.resolve({}, environ={"FIBER_TOY_RETRIES": "5"})
    assert config.settings(ToySettings, "toy", cfg) == ToySettings("toy://file", 5)
    cfg = config.resolve({"toy_retries": 7}, environ={"FIBER_TOY_RETRIES": "5"})
    assert config.settings(ToySettings, "toy", cfg).retries == 7
    assert config.settings(SlurmSettings, "slurm", cfg).partition == "from-file"
    assert cfg.slurm_partition == "from-file"  # the full key still reads


def test_fiber_init_and_the_module_attribute_take_a_backends_key():
    fiber.init(toy_endpoint="toy://init")
    assert config.settings(ToySettings, "toy").endpoint == "toy://init"
    assert fiber.config.toy_endpoint == "toy://init"
    fiber.config.slurm_partition = "gpu"
    assert config.get_config().slurm_partition == "gpu"
    with config.override(toy_retries=0):
        assert config.settings(ToySettings, "toy").retries == 0
    assert config.settings(ToySettings, "toy").retries == 2


def test_an_unknown_key_of_a_backend_names_the_closest_and_its_keys():
    with pytest.raises(ConfigError) as info:
        fiber.init(toy_endpont="x")
    assert "toy_endpoint" in str(info.value) and "toy_retries" in str(info.value)
    with pytest.raises(ConfigError, match="slurm_partition"):
        fiber.init(slurm_partiton="x")


def test_a_backends_own_checks_and_types_apply():
    with pytest.raises(ConfigError, match="toy_retries"):
        fiber.init(toy_retries=-1)
    with pytest.raises(ConfigError, match=r"expected a whole number \(int\)"):
        fiber.init(toy_retries="many")
    with pytest.raises(ConfigError, match="kubernetes_timeout"):
        fiber.init(kubernetes_timeout=0)
    with pytest.raises(ConfigError, match="kubernetes_image_pull_policy"):
        fiber.init(kubernetes_image_pull_policy="Sometimes")
    with pytest.raises(ConfigError, match="kubernetes_active_deadline"):
        fiber.init(kubernetes_active_deadline=-5)


def test_a_section_for_no_backend_is_refused(tmp_path):
    path = tmp_path / "conf"
    path.write_text("[fiber.slrum]\npartition = x\n")
    with pytest.raises(ConfigError, match="slurm"):
        config.load(str(path))


def test_a_backends_own_variables_are_not_warned_about_and_others_are():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.resolve({}, environ={"FIBER_TOY_INTERNAL": "1", "FIBER_TOY_BOGUS": "1"})
    said = " ".join(str(w.message) for w in caught)
    assert "FIBER_TOY_BOGUS" in said and "FIBER_TOY_INTERNAL" not in said


def test_machine_keys_are_not_handed_on_and_others_are():
    cfg = config.resolve({"kubernetes_kubeconfig": "/home/me/kube", "toy_retries": 4},
                         environ={})
    env = config.to_env(cfg)
    assert env["FIBER_KUBERNETES_KUBECONFIG"] == "" and env["FIBER_TOY_RETRIES"] == "4"
    assert config.resolve({}, environ=env).backends == {"toy": {"retries": 4}, "kubernetes":
                                                        {"kubeconfig": ""}}


def test_a_subclass_without_settings_of_its_own_has_no_keys():
    class Sub(ToyBackend):
        name = "toysub"

    register_backend("toysub", Sub)
    with pytest.raises(ConfigError, match="unknown key"):
        fiber.init(toysub_endpoint="x")


def test_the_configuration_reference_lists_every_backends_keys():
    import runpy

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    gen = runpy.run_path(os.path.join(root, "docs", "config_reference.py"))
    text = gen["table"]()
    for key in ("slurm_partition", "docker_pid_host", "kubernetes_timeout",
                "local_fork_server", "toy_endpoint"):
        assert f"`{key}` (`FIBER_{key.upper()}`)" in text
    for name, cls in gen["backend_settings"]():
        docs = gen["field_docs"](cls)
        assert all(docs.get(f.name) for f in dataclasses.fields(cls)), name


def test_the_built_in_backends_are_entry_points_only():
    from fiber.config import _registry

    assert {"local", "slurm", "docker", "kubernetes"} <= set(_registry._entry_points())
    assert get_backend("local").settings is not None
    assert KubernetesSettings().timeout > 0


# -- the batch backends' log directories ---------------------------------------------------

@pytest.mark.parametrize("backend, key, folder", [("slurm", "slurm_output_dir", "slurm-logs"),
                                                  ("sge", "sge_output_dir", "sge-logs")])
def test_a_batch_backends_logs_go_by_default_to_the_home_directory(monkeypatch, tmp_path,
                                                                   backend, key, folder):
    """Its nodes write them and ``fiber logs`` reads them: the default is in the home
    directory, which a cluster's nodes share far more often than /tmp; private, made 0700
    again if opened up; a configured one is taken as it is; one that cannot be made names
    the key that chooses another."""
    import importlib

    jobs = importlib.import_module(f"fiber.backends.{backend}._jobs")
    monkeypatch.setenv("HOME", str(tmp_path))
    with config.override(**{key: ""}):
        path = jobs.output_dir()
        assert path == str(tmp_path / ".fiber" / folder)
        assert os.stat(path).st_mode & 0o777 == 0o700
        os.chmod(path, 0o755)
        assert jobs.output_dir() == path and os.stat(path).st_mode & 0o777 == 0o700
    shared = tmp_path / "shared" / "logs"
    with config.override(**{key: str(shared)}):
        assert jobs.output_dir() == str(shared)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "file"))
    with config.override(**{key: ""}), pytest.raises(SubmitError) as e:
        jobs.output_dir()
    assert str(e.value).endswith(f"; set {key} to a directory the nodes can write"), e.value
