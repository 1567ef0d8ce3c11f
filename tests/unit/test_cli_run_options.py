"""``fiber run``'s options from the original fiber (issue 32): ``-a/--attach`` is the
default (follow the output) and excludes ``--detach``; ``-v/--volume`` asks the backend
for the config values that mount the volume, which then travel to the program with the
rest of its config. Offline: a recording backend stands for the cluster."""

from __future__ import annotations

from typing import Dict, List, Sequence

import pytest

from fiber import cli, config
from fiber.backends import CommandLineBackend, JobHandle, JobSpec, JobStatus
from fiber.backends.kubernetes import KubernetesBackend
from fiber.errors import BackendError, ConfigError


class _Recorder(CommandLineBackend):
    """Records the specs it is asked to submit; its volumes are Kubernetes claims."""

    name = "recorder"

    def __init__(self) -> None:
        self.specs: List[JobSpec] = []

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        self.specs.extend(specs)
        return [JobHandle("job-1", self.name)]

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        raise NotImplementedError

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        raise NotImplementedError

    def listen_host(self) -> str:
        return "127.0.0.1"

    def detach(self) -> None:
        pass

    def volume_settings(self, volumes: Sequence[str]) -> Dict[str, str]:
        return KubernetesBackend().volume_settings(volumes)


def test_attach_and_volume_parse_and_attach_excludes_detach(capsys):
    args = cli._parser().parse_args(["run", "-a", "-v", "data", "--volume", "logs:/logs:ro",
                                     "--", "python", "x.py"])
    assert args.attach and not args.detach
    assert args.volume == ["data", "logs:/logs:ro"]
    assert args.program == ["--", "python", "x.py"]
    with pytest.raises(SystemExit) as e:
        cli._parser().parse_args(["run", "-a", "-d", "--", "python"])
    assert e.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_volume_settings_add_claims_to_the_configured_ones():
    with config.override(kubernetes_volume_claims="old:/old"):
        assert KubernetesBackend().volume_settings(["data", "x:/x:ro"]) == {
            "kubernetes_volume_claims": "old:/old,data,x:/x:ro"}
        with pytest.raises(ConfigError, match="claim"):
            KubernetesBackend().volume_settings(["Not_A_Claim"])


def test_volume_reaches_the_program_config_and_a_backend_without_refuses(capsys):
    backend = _Recorder()
    args = cli._parser().parse_args(["run", "-d", "-v", "data", "--", "python", "x.py"])
    try:
        assert cli._run(backend, args) == 0
    finally:
        config.reset()
    (spec,) = backend.specs
    assert spec.env["FIBER_KUBERNETES_VOLUME_CLAIMS"] == "data"
    assert capsys.readouterr().out == "job-1\n"
    with pytest.raises(BackendError, match="no persistent volumes to mount"):
        CommandLineBackend.volume_settings(backend, ["data"])
