"""The ``slurm`` backend.

Two kinds of tests:

- without a cluster: the parsing of Slurm's output, the state and exit-code mapping, and
  the commands the backend runs, against fake ``sbatch``/``squeue``/``scancel``/
  ``scontrol`` on ``PATH``;
- on the real test cluster that ``scripts/test`` starts (``scripts/slurm-cluster.sh start
  3``: slurmctld and three slurmd in network namespaces, nodes ``node1..3``). This module
  starts nothing itself. Without ``SLURM_CONF`` or with an unreachable cluster those tests
  fail under ``CI=true`` and are skipped otherwise. Scenarios that kill or end the master
  run it as a script under ``tests/backends/slurm/scripts/`` (a fresh interpreter) that prints
  ``RESULT <json>``.

Run by hand (as root)::

    scripts/slurm-cluster.sh start 3 && eval "$(scripts/slurm-cluster.sh env)"
    FIBER_LISTEN_HOST=$FIBER_SLURM_DRIVER_ADDR .venv/bin/python -m pytest tests/backends/slurm
    scripts/slurm-cluster.sh stop
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import fiber
from fiber._core import _runtime
from fiber.backends import JobHandle, JobSpec, JobState, Resources, get_backend
from fiber.backends._batch import follow_file, render_script, split_env
from fiber.backends.slurm import (
    OWN_JOB_ENV,
    PROGRAM_ENV,
    SlurmBackend,
    controller_address,
    parse_exit_pair,
    parse_raw_exit,
    parse_sacct,
    parse_squeue,
    status_of,
)
from fiber.backends.slurm._jobs import last_lines
from fiber.backends.slurm._status import (
    ALONE,
    job_comment,
    parse_listing,
    stdout_path,
    task_ranges,
)
from fiber.errors import BackendError, ConfigError, SubmitError
from fiber.testing.conformance.support.waiting import unusable, wait_until

import support
from support.cli_helpers import (
    MAIN,
    fiber_cli,
    fiber_popen,
    program_of,
    ready_and_listed,
    started_job,
    stop_program,
    tagged,
)
from support.retire_helpers import mark_then_sleep, starts

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
CLUSTER_SH = os.path.join(support.REPO, "scripts", "slurm-cluster.sh")
NODES = ["node1", "node2", "node3"]

if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

import slurm_targets  # noqa: E402

# -- without a cluster ------------------------------------------------------------------


def test_exit_codes_follow_multiprocessing():
    assert parse_raw_exit("0") == 0
    assert parse_raw_exit("256") == 1  # exit(1): status 1 << 8
    assert parse_raw_exit(str(137 << 8)) == 137  # ExitCode 137:0 (python SIGKILLed in sh)
    assert parse_raw_exit("9") == -9  # ExitCode 0:9 (the batch shell itself killed)
    assert parse_raw_exit("15") == -15
    assert parse_raw_exit("") is None and parse_raw_exit("N/A") is None
    assert parse_exit_pair("3:0") == 3
    assert parse_exit_pair("137:0") == 137
    assert parse_exit_pair("0:9") == -9
    assert parse_exit_pair("0:15") == -15
    assert parse_exit_pair("bogus") is None


def test_states_map_to_job_states():
    assert status_of("PENDING", None).state == JobState.PENDING
    assert status_of("CONFIGURING", None).state == JobState.PENDING
    assert status_of("RUNNING", None).state == JobState.RUNNING
    assert status_of("COMPLETING", 0).state == JobState.RUNNING  # processes may live on
    done = status_of("COMPLETED", 0)
    assert (done.state, done.exitcode) == (JobState.SUCCEEDED, 0)
    failed = status_of("FAILED", 3, "NonZeroExitCode")
    assert (failed.state, failed.exitcode) == (JobState.FAILED, 3)
    assert status_of("FAILED", -9).exitcode == -9
    assert status_of("FAILED", 137).exitcode == 137
    assert status_of("FAILED", 0, "JobLaunchFailure").exitcode == 1  # never ran
    assert "JobLaunchFailure" in status_of("FAILED", 0, "JobLaunchFailure").reason
    # slurmctld's reason for a batch script a signal ended, though it ran: not passed on
    assert status_of("FAILED", -9, "JobLaunchFailure").reason == "Slurm FAILED: killed by SIGKILL"
    cancelled = status_of("CANCELLED", -15)
    assert (cancelled.state, cancelled.exitcode) == (JobState.CANCELLED, -15)
    assert status_of("CANCELLED", -15, cancelled="kill").exitcode == -9
    assert status_of("CANCELLED", 0, cancelled="term").exitcode == -15  # was pending
    lost = status_of("NODE_FAIL", None, "NodeDown", "node2")
    assert lost.state == JobState.LOST and lost.exitcode is None
    assert "NODE_FAIL" in lost.reason and "NodeDown" in lost.reason and "node2" in lost.reason
    timeout = status_of("TIMEOUT", 0)
    assert (timeout.state, timeout.exitcode) == (JobState.FAILED, -15)
    assert "time limit" in timeout.reason
    assert status_of("OUT_OF_MEMORY", 0).exitcode == -9
    assert status_of("PREEMPTED", None).state == JobState.LOST
    assert status_of("WEIRD_NEW_STATE", None).state == JobState.LOST


def test_parse_squeue_and_sacct():
    out = ("12_0|RUNNING|node1|None|0|\n12_1|FAILED|node2|NonZeroExitCode|768|\n"
           "13|NODE_FAIL|node3|NodeDown|0|\n14|PENDING||Resources|0|\n\n")
    rows = parse_squeue(out)
    assert rows["12_0"] == ("RUNNING", "node1", "", 0)
    assert rows["12_1"] == ("FAILED", "node2", "NonZeroExitCode", 3)
    assert rows["13"][0] == "NODE_FAIL" and rows["14"] == ("PENDING", "", "Resources", 0)
    acct = parse_sacct("12_3|CANCELLED by 0|0:15\n13|COMPLETED|0:0\n14|FAILED|137:0\n")
    assert acct == {"12_3": ("CANCELLED", -15), "13": ("COMPLETED", 0), "14": ("FAILED", 137)}


def test_scancel_gets_one_expression_per_job_array():
    """scancel sends one kill request per id it is given: the tasks of an array go as one
    ``<array>_[...]`` expression (of at most 500 tasks), other ids as they are."""
    assert task_ranges(["5_0", "5_1", "5_2", "7", "5_4", "8_3", "5_5", "1:2"]) == [
        "5_[0-2,4-5]", "7", "8_3", "1:2"]
    assert task_ranges(["5_3"]) == ["5_3"] and task_ranges([]) == []
    assert task_ranges([f"5_{i}" for i in range(1200)]) == [
        "5_[0-499]", "5_[500-999]", "5_[1000-1199]"]
    assert task_ranges([f"5_{i}" for i in range(0, 12, 2)], limit=4) == [
        "5_[0,2,4,6]", "5_[8,10]"]


def test_job_comments_are_listed_back():
    comment = job_comment("ab12", "fiber run:  python3 x.py\n hold")
    assert comment == "fiber ab12 fiber run: python3 x.py hold"
    out = (f"7|RUNNING|2026-11-23T16:20:01|{comment}        \n"
           "8_1|CANCELLED by 0|2026-11-23T16:20:02|fiber ab12 PoolWorker\n"
           "9|PENDING|N/A|someone else's job\n10|PENDING|N/A|\n")
    rows = parse_listing(out)
    assert [(r.job_id, r.program, r.name, r.state) for r in rows] == [
        ("7", "ab12", "fiber run: python3 x.py hold", "running"),
        ("8_1", "ab12", "PoolWorker", "cancelled")]
    assert rows[0].submitted.endswith("Z") and len(rows[0].submitted) == 20
    text = "   StdErr=/o/e.out\n   StdIn=/dev/null\n   StdOut=/o/my logs/fiber-x-7.out\n"
    assert stdout_path(text) == "/o/my logs/fiber-x-7.out" and stdout_path("JobId=7\n") == ""
    assert last_lines("a\nb\nc\n", 2) == "b\nc\n" and last_lines("a\nb", 1) == "b"
    assert last_lines("x\r50%\r100%\ny\n", 2) == "x\r50%\r100%\ny\n"  # \r ends no line
    assert last_lines("a\n", 0) == ""


def test_a_program_started_by_fiber_run_has_an_id_of_its_own(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "parent12")
    backend = SlurmBackend()
    assert backend.program == "parent12" and backend.inherited  # a child of that program
    backend.main_spec(JobSpec(command=("true",)))
    assert backend.program != "parent12" and not backend.inherited  # fiber run inside it


def test_logs_refuse_what_is_not_a_job_id():
    with pytest.raises(BackendError, match="not a Slurm job id"):
        SlurmBackend().read_logs("*")


def test_follow_skips_an_earlier_jobs_file_of_the_same_name(tmp_path):
    """Job ids start again when a cluster's state is reset: the output file of an earlier
    job with the same name and id is not shown as this job's."""
    path = tmp_path / "fiber-x-7.out"
    path.write_text("an earlier job's output\n")
    os.utime(path, (time.time() - 3600,) * 2)
    asked = []

    def ended() -> bool:
        asked.append(1)
        if len(asked) == 3:
            path.write_text("this job's output\n")  # the job truncates it and writes
        return len(asked) >= 4

    assert "".join(follow_file(str(path), ended, "?", since=time.time())) == (
        "this job's output\n")


def test_controller_address():
    assert controller_address("SlurmctldHost[0]        = ctl(10.201.0.2)\n") == "10.201.0.2"
    assert controller_address("ClusterName=x\nSlurmctldHost=head01\n") == "head01"
    assert controller_address("slurmctldhost=a(1.2.3.4)\nSlurmctldHost=b\n") == "1.2.3.4"
    assert controller_address("ControlMachine=old\n") == "old"
    assert controller_address("# SlurmctldHost=commented\n") == ""


def _listen_host_error(monkeypatch: Any, conf: str) -> str:
    """What SlurmBackend.listen_host() raises, the real ``scontrol`` reading ``conf``."""
    if not shutil.which("scontrol"):
        unusable("the Slurm client", "scontrol is not installed (scripts/slurm-cluster.sh "
                 "install)")
    monkeypatch.setenv("SLURM_CONF", conf)
    with fiber.config.override(listen_host=""), pytest.raises(BackendError) as info:
        SlurmBackend().listen_host()
    return str(info.value)


def test_slurm_not_reachable_is_said_in_scontrols_words_not_as_listen_host(monkeypatch,
                                                                            tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nocontroller\n")  # no SlurmctldHost: scontrol gives up
    said = _listen_host_error(monkeypatch, str(conf))
    assert said.startswith("Slurm is not reachable from here (scontrol show config failed: "
                           "scontrol: error: No SlurmctldHost defined."), said
    assert f"looked at {conf}, /etc/slurm/slurm.conf" in said and "SLURM_CONF" in said
    assert "set listen_host" not in said


def test_a_controller_name_that_does_not_resolve_is_said_so(monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=nosuchhost.invalid\n")
    said = _listen_host_error(monkeypatch, str(conf))  # ~10 s: scontrol tries to resolve it
    assert said.startswith(f"the Slurm controller 'nosuchhost.invalid' does not resolve "
                           f"(Name or service not known): check SlurmctldHost in {conf}"), said
    assert "set listen_host" not in said


def test_job_script_exports_each_tasks_environment(tmp_path):
    envs = [{"FIBER_SECRET": "s3cret", "FIBER_JOB": f"tok{i}", "Q": "it's \"q\" $x"}
            for i in range(3)]
    common, own = split_env(envs)
    assert common == {"FIBER_SECRET": "s3cret", "Q": "it's \"q\" $x"}
    assert own == [{"FIBER_JOB": "tok0"}, {"FIBER_JOB": "tok1"}, {"FIBER_JOB": "tok2"}]
    script = render_script(["env"], common, own, index_var="SLURM_ARRAY_TASK_ID",
                           setup=[f'export {OWN_JOB_ENV}="$SLURM_JOB_ID"'])
    assert script.count("s3cret") == 1  # shared entries are written once
    path = tmp_path / "job.sh"
    path.write_text(script)
    for i in range(3):
        out = subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=30,
                             env={"SLURM_ARRAY_TASK_ID": str(i), "SLURM_JOB_ID": "77",
                                  "PATH": os.environ["PATH"]}).stdout.splitlines()
        assert f"FIBER_JOB=tok{i}" in out and "FIBER_SECRET=s3cret" in out
        assert "Q=it's \"q\" $x" in out and f"{OWN_JOB_ENV}=77" in out
    bad = subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=30,
                         env={"SLURM_ARRAY_TASK_ID": "9", "PATH": os.environ["PATH"]})
    assert bad.returncode == 2 and "no job" in bad.stderr
    with pytest.raises(ValueError, match="invalid environment variable name"):
        render_script(["true"], {"BAD NAME": "x"}, [{}])


_FAKE = {
    "sbatch": """#!/bin/sh
n=$(cat "$FAKE_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$FAKE_DIR/count"
printf '%s\\n' "$@" > "$FAKE_DIR/sbatch.$n.argv"
cat > "$FAKE_DIR/sbatch.$n.script"
if [ -n "$FAKE_SBATCH_FAIL" ]; then echo "sbatch: error: $FAKE_SBATCH_FAIL" >&2; exit 1; fi
if [ -n "$FAKE_SLEEP" ]; then sleep "$FAKE_SLEEP"; fi
echo "$((100 + n));fakecluster"
""",
    "squeue": """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/squeue.log"
cat "$FAKE_DIR/squeue.out" 2>/dev/null
""",
    "scancel": """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/scancel.log"
""",
    "scontrol": """#!/bin/sh
echo "SlurmctldHost[0]        = ctl(127.0.0.1)"
echo "AccountingStorageType   = accounting_storage/none"
echo "MaxArraySize            = 4"
""",
}


class FakeSlurmBackend(SlurmBackend):
    """A backend whose exit hook is removed after the test (its jobs are fake)."""

    made: List[SlurmBackend] = []

    def __init__(self) -> None:
        super().__init__()
        FakeSlurmBackend.made.append(self)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> Iterator[Any]:
    """Fake Slurm commands on PATH; they record their arguments in ``tmp_path``. Use
    ``FakeSlurmBackend`` with it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in _FAKE.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    try:
        with fiber.config.override(slurm_output_dir=str(tmp_path / "logs"),
                                   slurm_mode="jobs"):
            yield tmp_path
    finally:
        for b in FakeSlurmBackend.made:
            atexit.unregister(b.cancel_unfinished)
        FakeSlurmBackend.made.clear()


def _calls(d: Any, n: int) -> List[List[str]]:
    return [(d / f"sbatch.{i}.argv").read_text().splitlines() for i in range(1, n + 1)]


def _spec(i: int, command=("python", "-m", "fiber.process._bootstrap"), resources=Resources(cpu=1),
          name: Optional[str] = None) -> JobSpec:
    return JobSpec(command=tuple(command), resources=resources, name=name or f"PoolWorker-{i}",
                   env={"FIBER_PARENT": "tcp://10.0.0.1:5000", "FIBER_JOB": f"{i:032x}",
                        "FIBER_LISTEN_HOST": "", "FIBER_SECRET": "ab" * 32})


def test_sbatch_command_lines_arrays_and_secrets(fake_slurm):
    b = FakeSlurmBackend()
    with fiber.config.override(slurm_partition="gpu", slurm_account="acct", slurm_qos="high",
                               slurm_time_limit="1:00:00", slurm_job_name_prefix="rl",
                               slurm_extra_args="--constraint='v100|a100' --exclusive"):
        handles = b.submit([_spec(i) for i in range(3)]
                           + [_spec(9, resources=Resources(cpu=1.5, memory_mb=2048, gpu=1),
                                    name="trainer")])
    assert [h.job_id for h in handles] == ["101_0", "101_1", "101_2", "102"]
    assert all(h.pid is None and h.backend == "slurm" for h in handles)
    array, single = _calls(fake_slurm, 2)
    assert "--array=0-2" in array and not any(a.startswith("--array") for a in single)
    for argv in (array, single):
        for flag in ("--parsable", "--no-requeue", "--partition=gpu", "--account=acct",
                     "--qos=high", "--time=1:00:00", "--constraint=v100|a100", "--exclusive",
                     "--nodes=1", "--ntasks=1"):
            assert flag in argv, (flag, argv)
        assert not any("ab" * 32 in a or "FIBER_JOB" in a for a in argv)  # no secrets
    assert "--job-name=rl-PoolWorker" in array and "--job-name=rl-trainer" in single
    assert "--cpus-per-task=1" in array and "--cpus-per-task=2" in single  # ceil(1.5)
    assert "--mem=2048" in single and "--gpus=1" in single
    assert not any(a.startswith(("--mem", "--gpus")) for a in array)
    logs = fake_slurm / "logs"
    assert f"--output={logs}/%x-%A_%a.out" in array and f"--output={logs}/%x-%j.out" in single
    script = (fake_slurm / "sbatch.1.script").read_text()
    assert script.count("ab" * 32) == 1 and 'case "${SLURM_ARRAY_TASK_ID:-}" in' in script
    assert all(f"{i:032x}" in script for i in range(3))
    assert script.rstrip().endswith("exec python -m fiber.process._bootstrap")
    assert f"{9:032x}" in (fake_slurm / "sbatch.2.script").read_text()


def test_large_groups_are_split_at_max_array_size(fake_slurm):
    handles = FakeSlurmBackend().submit([_spec(i) for i in range(1003)])  # fake MaxArraySize=4
    assert len(handles) == 1003 and handles[0].job_id == "101_0"
    assert handles[4].job_id == "102_0" and handles[-1].job_id == "351_2"
    assert "--array=0-3" in _calls(fake_slurm, 1)[0]


def test_status_is_one_squeue_call_a_job_and_cancel_is_scancel(fake_slurm):
    b = FakeSlurmBackend()
    handles = b.submit([_spec(i) for i in range(3)]
                       + [_spec(7, resources=Resources(cpu=2), name="solo")])
    (fake_slurm / "squeue.out").write_text(
        "101_0|RUNNING|node1|None|0|\n101_1|CANCELLED|node2|None|15|\n"
        "101_2|NODE_FAIL|node3|NodeDown|0|\n102|COMPLETED|node1|None|0|\n")
    b.cancel([handles[1]], force=True)
    st = b.status(handles)
    calls = (fake_slurm / "squeue.log").read_text().splitlines()
    # one id a call: each a single-job RPC to slurmctld, not a load of the whole queue
    jobs = sorted(a for c in calls for a in c.split() if a.startswith("--jobs="))
    assert jobs == ["--jobs=101", "--jobs=102"] and len(calls) == 2
    assert all("--states=all" in c and "--user" not in c for c in calls)
    assert st["101_0"].state == JobState.RUNNING and handles[0].host == "node1"
    assert (st["101_1"].state, st["101_1"].exitcode) == (JobState.CANCELLED, -9)
    assert st["101_2"].state == JobState.LOST and "NodeDown" in st["101_2"].reason
    assert (st["102"].state, st["102"].exitcode) == (JobState.SUCCEEDED, 0)
    assert (fake_slurm / "scancel.log").read_text().split() == ["--signal=KILL", "101_1"]
    # finished jobs are not asked again, and squeue forgetting a job makes it LOST
    (fake_slurm / "squeue.out").write_text("")
    st = b.status(handles)
    assert st["102"].state == JobState.SUCCEEDED
    assert st["101_0"].state == JobState.LOST and "no longer lists" in st["101_0"].reason
    assert "--jobs=101" in (fake_slurm / "squeue.log").read_text().splitlines()[-1]
    b.cancel_unfinished()  # at exit: nothing is left unfinished
    assert len((fake_slurm / "scancel.log").read_text().splitlines()) == 1


def test_a_poll_of_many_jobs_is_one_squeue_call_for_the_users_jobs(fake_slurm):
    b = FakeSlurmBackend()
    handles = [h for i in range(ALONE + 1) for h in b.submit([_spec(i)])]  # 101..117
    rows = [f"{101 + i}|RUNNING|node1|None|0|" for i in range(ALONE + 1)]
    (fake_slurm / "squeue.out").write_text("\n".join(rows + ["99|RUNNING|node2|None|0|"]))
    st = b.status(handles)
    calls = (fake_slurm / "squeue.log").read_text().splitlines()
    assert len(calls) == 1 and f"--user={os.getuid()}" in calls[0].split()
    assert "--jobs" not in calls[0] and "--states=all" in calls[0]
    assert sorted(st) == sorted(h.job_id for h in handles)  # not the other job, 99
    assert all(s.state == JobState.RUNNING for s in st.values())


def test_exit_hook_cancels_unfinished_jobs(fake_slurm):
    b = FakeSlurmBackend()
    handles = b.submit([_spec(i) for i in range(2)])
    (fake_slurm / "squeue.out").write_text("101_0|COMPLETED|node1|None|0|\n"
                                           "101_1|RUNNING|node1|None|0|\n")
    b.status(handles)
    b.cancel_unfinished()
    assert (fake_slurm / "scancel.log").read_text().split() == ["101_1"]


def test_failed_commands_raise_submit_error(fake_slurm, monkeypatch):
    b = FakeSlurmBackend()
    monkeypatch.setenv("FAKE_SBATCH_FAIL", "invalid partition specified: nosuch")
    with pytest.raises(SubmitError) as err:
        b.submit([_spec(1)])
    e = err.value
    assert e.returncode == 1 and "invalid partition specified: nosuch" in e.stderr
    assert e.command and e.command[0] == "sbatch" and "nosuch" in str(e)
    monkeypatch.delenv("FAKE_SBATCH_FAIL")
    monkeypatch.setenv("FAKE_SLEEP", "30")
    b.submit_timeout = 0.5
    t = time.monotonic()
    with pytest.raises(SubmitError, match="no answer within 0.5 s"):
        b.submit([_spec(1)])
    assert time.monotonic() - t < 10
    monkeypatch.setenv("PATH", str(fake_slurm / "empty"))
    with pytest.raises(SubmitError, match="not found"):
        FakeSlurmBackend().submit([_spec(1)])


def test_mode_selection(monkeypatch):
    b = FakeSlurmBackend()
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv(OWN_JOB_ENV, raising=False)
    with fiber.config.override(slurm_mode="auto"):
        assert b.mode() == "jobs"
        monkeypatch.setenv("SLURM_JOB_ID", "42")  # inside an allocation: steps
        assert b.mode() == "steps"
        monkeypatch.setenv(OWN_JOB_ENV, "42")  # a fiber job itself: jobs
        assert b.mode() == "jobs"
    with fiber.config.override(slurm_mode="jobs"):
        monkeypatch.delenv(OWN_JOB_ENV)
        assert b.mode() == "jobs"
    with fiber.config.override(slurm_mode="bogus"), pytest.raises(ConfigError, match="slurm_mode"):
        b.mode()
    monkeypatch.delenv("SLURM_JOB_ID")
    with fiber.config.override(slurm_mode="steps"), pytest.raises(SubmitError, match="salloc"):
        b.submit([_spec(1)])


def test_config_keys_and_registry():
    cfg = fiber.config.resolve({}, environ={"FIBER_SLURM_PARTITION": "gpu",
                                            "FIBER_SLURM_MODE": "steps"}, config_file="/none")
    assert (cfg.slurm_partition, cfg.slurm_mode, cfg.slurm_job_name_prefix) == (
        "gpu", "steps", "fiber")
    assert "slurm" in fiber.backends.known_backends()
    assert isinstance(get_backend("slurm"), SlurmBackend)


# -- on the test cluster ----------------------------------------------------------------


def _run(argv: List[str], timeout: float = 30, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def _node_cpus() -> int:
    return int(_run(["sinfo", "-h", "-N", "-o", "%c"], timeout=15).stdout.split()[0])


def _all_running(pool: Any, n: int) -> bool:
    """``n`` workers of ``pool``, each running a task."""
    workers = pool.status().workers
    return len(workers) == n and all(w.state == "running" for w in workers)


def _nodes_idle() -> List[str]:
    cp = _run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], timeout=15)
    return sorted(set(cp.stdout.split())) if cp.returncode == 0 else []


def _wait_nodes_idle(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _nodes_idle() != NODES:
        if time.monotonic() > deadline:
            pytest.fail(f"nodes not idle after {timeout} s:\n"
                        + _run(["sinfo", "-N", "-l"]).stdout + _run(["squeue"]).stdout)
        time.sleep(0.2)


def _live_jobs(ids: List[str]) -> List[str]:
    """Those of ``ids`` squeue still shows pending, running or completing."""
    bases = sorted({i.split("_")[0] for i in ids})
    cp = _run(["squeue", "-h", "-r", "-j", ",".join(bases), "-o", "%i %T"], timeout=15)
    return [line for line in cp.stdout.splitlines() if line.split()[0] in ids]


def _cluster_sh(*args: str) -> None:
    cp = _run([CLUSTER_SH, *args], timeout=60)
    assert cp.returncode == 0, cp.stderr


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The running test cluster; the driver address (where the master listens)."""
    problem = ""
    if not os.environ.get("SLURM_CONF"):
        problem = "SLURM_CONF is not set"
    else:
        try:
            cp = _run(["sinfo", "-h", "-N", "-o", "%N"], timeout=20)
            nodes = sorted(set(cp.stdout.split()))
            if cp.returncode != 0 or nodes != NODES:
                problem = (f"`sinfo` (exit {cp.returncode}) shows nodes {nodes}, expected "
                           f"{NODES}: {cp.stderr.strip()}")
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = f"`sinfo` failed: {e}"
    if problem:
        message = (f"no Slurm test cluster: {problem} (start it with `scripts/slurm-cluster.sh"
                   " start 3` and `eval \"$(scripts/slurm-cluster.sh env)\"`)")
        unusable("the Slurm test cluster", message)
    driver = os.environ.get("FIBER_SLURM_DRIVER_ADDR", "10.201.0.1")
    hub = _runtime.hub_if_started()
    if hub is None and not fiber.get_config().listen_host:
        fiber.init(listen_host=driver)  # one hub per process: jobs on the nodes reach it
    elif hub is not None and hub.address.split("://")[-1].startswith("127."):
        pytest.fail(f"this process's hub listens on {hub.address}, which Slurm jobs cannot "
                    "reach: set FIBER_LISTEN_HOST to the cluster address", pytrace=False)
    _wait_nodes_idle()
    yield driver


@pytest.fixture
def slurm(cluster: str) -> Any:
    return fiber.get_context("slurm")


def _scenario_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FIBER_BACKEND",)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _result(stdout: str, stderr: str = "", returncode: int = 0) -> Dict[str, Any]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no RESULT (exit {returncode})\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


def test_process_exit_codes_kill_and_terminate(slurm):
    p = slurm.Process(target=slurm_targets.exit_with, args=(3,))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    assert p._job.handle.pid is None and p.pid >= 1 << 22  # synthetic pid
    assert p.host in NODES  # the child's own report
    deadline = time.monotonic() + 30  # the watcher fills JobHandle.host from squeue %N
    while p._job.handle.host not in NODES and time.monotonic() < deadline:
        time.sleep(0.1)
    assert p._job.handle.host in NODES
    ok = slurm.Process(target=slurm_targets.sleep, args=(0,))
    ok.start()
    ok.join(60)
    assert ok.exitcode == 0
    s = slurm.Process(target=slurm_targets.kill_self, args=(signal.SIGKILL,))
    s.start()
    s.join(60)
    assert s.exitcode == -9  # python SIGKILLed: ExitCode 0:9 (the script exec-s python)
    for how, code in (("kill", -9), ("terminate", -15)):
        k = slurm.Process(target=slurm_targets.sleep, args=(120,))
        k.start()
        deadline = time.monotonic() + 60
        while not k.host and time.monotonic() < deadline:  # connected: running
            time.sleep(0.05)
        assert k.is_alive()
        getattr(k, how)()
        k.join(30)
        assert k.exitcode == code, how
        assert k.host in NODES
    pending = slurm.Process(target=slurm_targets.sleep, args=(120,))
    with fiber.config.override(slurm_extra_args="--begin=now+1hour"):
        pending.start()
    assert get_backend("slurm").status([pending._job.handle])[
        pending._job.handle.job_id].state == JobState.PENDING
    pending.terminate()
    pending.join(30)
    assert pending.exitcode == -15


def test_pool_is_one_job_array_spread_over_three_nodes(slurm, monkeypatch):
    backend = get_backend("slurm")
    calls: List[List[str]] = []
    mine: List[List[str]] = []
    run = backend.run_command

    def counting(argv, **kw):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        if threading.current_thread() is threading.main_thread():
            mine.append(list(argv))  # not the job watcher's polls
        return run(argv, **kw)

    monkeypatch.setattr(backend, "run_command", counting)
    with slurm.Pool(6) as pool:
        # A node whose workers start last could otherwise find the map done.
        _wait_for(lambda: _connected(pool) == 6, 120, "the 6 workers connected")
        results = pool.map(slurm_targets.slow_square, range(60), chunksize=1)
        handles = [ws.process._job.handle for ws in pool._core.procs.values()]
        assert [r for r, _ in results] == [x * x for x in range(60)]
        assert sorted({h for _, h in results}) == NODES  # all three nodes worked
        sbatch = [c for c in calls if c[0] == "sbatch"]
        assert len(sbatch) == 1 and "--array=0-5" in sbatch[0]
        array_ids = {h.job_id.split("_")[0] for h in handles}
        assert len(array_ids) == 1 and len(handles) == 6
        array_id = array_ids.pop()
        assert sorted(h.job_id for h in handles) == [f"{array_id}_{i}" for i in range(6)]
        shown = _run(["squeue", "-h", "-r", "-t", "all", "-j", array_id, "-o", "%i %N"]).stdout
        assert sorted(line.split()[0] for line in shown.splitlines()) == [
            f"{array_id}_{i}" for i in range(6)]
        assert sorted({h.host for h in handles}) == NODES  # squeue %N filled JobHandle.host
        mine.clear()
        statuses = backend.status(handles)
        assert [c[0] for c in mine] == ["squeue"]  # one query for all jobs
        assert all(st.state == JobState.RUNNING for st in statuses.values())


def _rpc_counts() -> Dict[str, int]:
    """slurmctld's count of each RPC type it has served (``sdiag``)."""
    cp = _run(["sdiag"], timeout=30)
    assert cp.returncode == 0, cp.stderr
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r"^\s*(REQUEST_\w+)\s*\(\s*\d+\)\s*count:(\d+)", cp.stdout, re.MULTILINE)}


def test_a_pool_of_an_array_and_a_replacement_polls_one_job_a_call(slurm, monkeypatch):
    """A pool whose jobs are its array and a replacement's job of its own: each status
    poll asks squeue for one job a call, which slurmctld serves as a single-job RPC
    (REQUEST_JOB_INFO_SINGLE, the job or the array's tasks), never as a load of every
    job in the cluster (REQUEST_JOB_INFO: what squeue asks given several ids)."""
    backend = get_backend("slurm")
    asked: List[Tuple[float, List[str]]] = []  # (when it was called, its argv)
    run = backend.run_command

    def recording(argv, **kw):  # type: ignore[no-untyped-def]
        called = time.monotonic()
        out = run(argv, **kw)
        if argv[0] == "squeue":  # once answered: its RPCs are counted (a CI run read the
            asked.append((called, list(argv)))  # counts while a listed squeue ran)
        return out

    monkeypatch.setattr(backend, "run_command", recording)
    with slurm.Pool(3) as pool:
        _wait_for(lambda: _connected(pool) == 3, 120, "the 3 workers connected")
        _wait_for(lambda: all(h.host for h in _pool_handles(pool)), 30, "squeue %N")
        victim = pool._core.live_workers()[0].process
        job = victim._job
        cp = _run(["ip", "netns", "exec", f"fbs-{job.handle.host}", "kill", "-9",
                   str(job.remote_pid)])
        assert cp.returncode == 0, cp.stderr
        _wait_for(lambda: victim.exitcode is not None, 60, "the victim's exit code")
        _wait_for(lambda: _connected(pool) == 3, 120, "the replacement connected")
        ids = sorted({h.job_id.split("_")[0] for h in _pool_handles(pool)})
        assert len(ids) == 2, ids  # the array, and the replacement's own job
        before = _rpc_counts()
        since = time.monotonic()  # (the squeues called after `before`, answered before
        results = pool.map(slurm_targets.square_where, range(30), chunksize=1)
        _wait_for(lambda: sum(t > since for t, _ in asked) >= 6, 30,
                  "3 polls of the watcher")
        window = [argv for t, argv in asked if t > since]
        after = _rpc_counts()  # `after`: their RPCs are all in the counts' growth)
    assert victim.exitcode == -9
    assert [y for _, y, _, _ in results] == [x * x for x in range(30)]
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert grew.get("REQUEST_JOB_INFO", 0) == 0, grew
    assert grew.get("REQUEST_JOB_INFO_SINGLE", 0) >= len(window), (grew, len(window))
    jobs = [[a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")] for argv in window]
    assert all(len(j) == 1 for j in jobs) and sorted({j[0] for j in jobs}) == ids, window


def _netns_of(pid: int) -> str:
    return _run(["ip", "netns", "identify", str(pid)], timeout=15).stdout.strip()


def _connected(pool: Any) -> int:
    core = pool._core
    with core.hub.lock:
        return sum(1 for ws in core.live_workers() if ws.connected)


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def _launch_failures() -> List[str]:
    """The nodes' log lines of batch launches that Slurm gave up (a node slower to answer
    than MessageTimeout: the task then ends CANCELLED or NODE_FAIL before it runs, and the
    pool replaces it with a job of its own), to say why a test saw more sbatch calls."""
    logs = os.path.join(os.environ.get("FIBER_SLURM_DIR", "/tmp/fiber-slurm"), "log")
    lines = []
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        if name.startswith("slurmd-"):
            with open(os.path.join(logs, name), errors="replace") as f:
                lines += [f"{name}: {line.strip()}" for line in f
                          if "batch launch" in line or "Could not launch" in line]
    return lines


def _busy_worker(pool: Any) -> Any:
    """A connected worker holding a task, or None."""
    core = pool._core
    with core.hub.lock:
        busy = [ws for ws in core.live_workers() if ws.connected and ws.pending]
        return busy[len(busy) // 2] if busy else None


@pytest.mark.scale
def test_pool_of_128_is_one_job_array_and_every_result_comes_once_after_a_kill(
        slurm, monkeypatch):
    """Pool(128) in partition "wide" (oversubscribed: 128 one-CPU jobs at once on 3 x 2
    CPUs), a job a worker as asked (the pool would choose jobs of 2, the nodes' CPUs):
    one sbatch, one job array; a worker's Python SIGKILLed on its node a quarter
    of the way through a map of 512 tasks, every result delivered exactly once.

    The kill is ``kill -9`` of the worker's own process inside its node's namespace (the
    pid it reported when it started, checked to live in that node's network namespace):
    a crash as the OOM killer or a segfault makes it, which Slurm learns of only from the
    job's end (FAILED, signal 9). ``scancel --signal=KILL`` would go through Slurm and mark
    the job as cancelled, an operator's act rather than a crash."""
    n, rounds = 128, 4
    total = n * rounds
    backend = get_backend("slurm")
    calls: List[Any] = []
    run = backend.run_command

    def timed(argv, **kw):  # type: ignore[no-untyped-def]
        t = time.monotonic()
        try:
            return run(argv, **kw)
        finally:
            calls.append((list(argv), time.monotonic() - t))

    monkeypatch.setattr(backend, "run_command", timed)
    delivered: Dict[int, int] = {}
    with fiber.config.override(slurm_partition="wide"):
        t0 = time.monotonic()
        with slurm.Pool(n, workers_per_job=1) as pool:
            _wait_for(lambda: _connected(pool) == n, 420, f"{n} workers connected")
            started = time.monotonic() - t0
            sbatch = [argv for argv, _ in calls if argv[0] == "sbatch"]
            assert len(sbatch) == 1 and f"--array=0-{n - 1}" in sbatch[0], (
                _launch_failures(), sbatch)
            assert "--partition=wide" in sbatch[0]
            handles = _pool_handles(pool)
            array_id = handles[0].job_id.split("_")[0]
            assert sorted(h.job_id for h in handles) == sorted(
                f"{array_id}_{i}" for i in range(n))
            _wait_for(lambda: all(h.host for h in _pool_handles(pool)), 60, "squeue %N")
            assert sorted({h.host for h in _pool_handles(pool)}) == NODES

            it = pool.imap_unordered(slurm_targets.square_where, range(total), chunksize=1)
            victim = victim_pid = None
            values_ok, hosts = True, set()
            for x, y, host, _ in it:
                delivered[x] = delivered.get(x, 0) + 1
                values_ok = values_ok and y == x * x
                hosts.add(host)
                if victim is None and len(delivered) >= total // 4:
                    victim = _busy_worker(pool)
                    if victim is not None:
                        job = victim.process._job
                        victim_pid, node = job.remote_pid, job.handle.host
                        assert _netns_of(victim_pid) == f"fbs-{node}", (victim_pid, node)
                        cp = _run(["ip", "netns", "exec", f"fbs-{node}", "kill", "-9",
                                   str(victim_pid)])
                        assert cp.returncode == 0, cp.stderr
            assert victim is not None, "no worker held a task"
            assert sum(delivered.values()) == total and values_ok
            assert sorted(delivered) == list(range(total))
            assert [x for x, k in delivered.items() if k != 1] == []
            assert sorted(hosts) == NODES
            _wait_for(lambda: victim.exitcode is not None, 60, "the victim's exit code")
            assert victim.exitcode == -9  # Slurm: FAILED, ExitCode 0:9
            # the replacement: a job of its own, then the pool is whole again
            _wait_for(lambda: _connected(pool) == n, 240, "the replacement connected")
            after = [argv for argv, _ in calls if argv[0] == "sbatch"][1:]
            assert len(after) == 1 and not any(a.startswith("--array") for a in after[0])
            again = pool.map(slurm_targets.square_where, range(n), chunksize=1)
            assert [y for _, y, _, _ in again] == [x * x for x in range(n)]
            assert victim_pid not in {pid for _, _, _, pid in again}
            polls = [(argv, took) for argv, took in calls if argv[0] == "squeue"]
            # each squeue call asks for one job: the array, or the replacement
            asked = [a.split("=", 1)[1] for argv, _ in polls for a in argv
                     if a.startswith("--jobs=")]
            assert len(asked) == len(polls) and array_id in asked, polls[-3:]
            assert all(job_id.isdigit() for job_id in asked), sorted(set(asked))
    # terminate: one scancel, the array's tasks as one expression (one kill request)
    scancels = [argv for argv, _ in calls if argv[0] == "scancel"]
    assert len(scancels) == 1, scancels
    assert sum(a.startswith(f"{array_id}_[") for a in scancels[0]) == 1, scancels
    ids = [h.job_id for h in handles]
    deadline = time.monotonic() + 60
    while _live_jobs(ids):
        assert time.monotonic() < deadline, f"jobs left: {_live_jobs(ids)[:5]}"
        time.sleep(0.5)
    took = sorted(t for _, t in polls)
    print(f"Pool({n}) on Slurm: all connected {started:.0f} s after Pool(); "
          f"{len(polls)} squeue polls in {time.monotonic() - t0:.0f} s, each "
          f"{1000 * took[len(took) // 2]:.0f} ms (median), {1000 * took[-1]:.0f} ms (max)")
    _wait_nodes_idle(120)


def _pool_handles(pool: Any) -> List[JobHandle]:
    return [ws.process._job.handle for ws in list(pool._core.procs.values())]


def _wait_lost(handles: List[JobHandle], timeout: float = 60) -> Dict[str, Any]:
    backend = get_backend("slurm")
    deadline = time.monotonic() + timeout
    while True:
        st = backend.status(handles)
        if all(s.state.finished for s in st.values()):
            return st
        if time.monotonic() > deadline:
            pytest.fail(f"jobs not finished after {timeout} s: {st}")
        time.sleep(0.5)


@pytest.mark.parametrize("how", ["crash", "partition"])
def test_node_failure_mid_map_every_result_once(slurm, how):
    node = 2 if how == "crash" else 3
    tasks = [(i, 0.3) for i in range(120)]
    try:
        with slurm.Pool(6) as pool:
            result = pool.starmap_async(slurm_targets.where, tasks, chunksize=1)
            deadline = time.monotonic() + 60
            while not all(h.host for h in _pool_handles(pool)):
                assert time.monotonic() < deadline, "workers did not start"
                time.sleep(0.1)
            time.sleep(2)  # every worker busy
            victims = [h for h in _pool_handles(pool) if h.host == f"node{node}"]
            assert len(victims) == 2, [(h.job_id, h.host) for h in _pool_handles(pool)]
            if how == "crash":
                _cluster_sh("crash", str(node))
            else:
                _cluster_sh("partition", str(node), "on")
            t = time.monotonic()
            values = result.get(timeout=180)
            took = time.monotonic() - t
            assert sorted(x for x, _, _ in values) == list(range(120))  # each once, in order
            assert [x for x, _, _ in values] == list(range(120))
            st = _wait_lost(victims)  # Slurm marks the node down: NODE_FAIL
            for h in victims:
                assert st[h.job_id].state == JobState.LOST, st
                assert "NODE_FAIL" in st[h.job_id].reason
            print(f"{how}: map finished {took:.1f} s after the failure; victims {st}")
    finally:
        if how == "crash":
            _cluster_sh("restart-node", str(node))
        else:
            _cluster_sh("partition", str(node), "off")
    _wait_nodes_idle()


@pytest.mark.parametrize("per_job", [1, 2])
def test_a_map_longer_than_the_time_limit_runs_at_full_width_and_exact(slurm, tmp_path,
                                                                         caplog, per_job):
    """Issue 29: jobs of a 1-minute limit, a map of 80 tasks of 7 s on Pool(4) (over twice
    the limit): workers are renewed before their limit (or retire on Slurm's notice or
    SIGTERM); every result once, no task started twice, no retry counted, no WARNING.
    Issue 45: in jobs of 2 workers, a job is renewed by a job of 2 (one line a job)."""
    marks = str(tmp_path)
    os.chmod(marks, 0o777)
    with fiber.config.override(slurm_time_limit="1", log_level="info"):
        started = time.monotonic()
        with slurm.Pool(4, workers_per_job=per_job) as pool:
            got = pool.starmap(mark_then_sleep,
                               [(x, marks, 7) for x in range(80)], chunksize=1)
            status = pool.status()
        took = time.monotonic() - started
    assert got == list(range(80))
    runs = starts(marks)
    assert sorted(runs) == list(range(80))
    assert all(len(r) == 1 for r in runs.values()), runs  # none started twice
    assert status.retried == 0
    records = [r for r in caplog.records if r.name == "fiber"]
    assert not [r for r in records if r.levelname == "WARNING"], [r.getMessage() for r in records]
    renewed = [r for r in records if " is renewed " in r.getMessage()
               or " retires: " in r.getMessage()]
    assert len(renewed) >= 4 // per_job, [r.getMessage() for r in records]
    if per_job > 1:
        jobs = [r.getMessage() for r in renewed if " is renewed " in r.getMessage()]
        assert all(m.startswith("PoolJob-") and "(2 workers)" in m for m in jobs), jobs
    print(f"80 tasks of 7 s on Pool(4) in jobs of {per_job}, 1-minute limit: {took:.0f} s "
          f"(140 s of work a worker); {len(renewed)} renewals or retirements")
    _wait_nodes_idle()


@pytest.mark.parametrize("partition", ["debug", "requeue"])
def test_a_burst_of_preempting_jobs_mid_map_costs_no_task(slurm, tmp_path, caplog,
                                                          partition):
    """Issue 29: the test cluster preempts by partition priority (PreemptType=
    preempt/partition_prio: SIGTERM, then SIGKILL KillWait=5 s later), with PreemptMode=
    CANCEL on "debug" and REQUEUE on "requeue" (fiber submits --no-requeue: Slurm cancels
    those jobs too, rather than run a worker's job twice).
    Pool(3) on the partition runs 60 tasks of 1 s; mid-map, a burst of jobs of the "urgent"
    partition takes every CPU of the cluster for 12 s: every worker retires, the pool's
    replacements wait (pending: ``starting`` in ``pool.status()``) until the burst ends,
    and the map goes on. Every result once, no task started twice, no retry counted, no
    WARNING."""
    marks = str(tmp_path)
    os.chmod(marks, 0o777)
    cpus = _node_cpus()
    with fiber.config.override(log_level="info", slurm_partition=partition):
        with slurm.Pool(3) as pool:
            started = time.monotonic()
            result = pool.starmap_async(mark_then_sleep,
                                        [(x, marks, 1) for x in range(60)], chunksize=1)
            # every worker runs a task (under load one may still be starting: preempted
            # before it connects, it would be replaced without retiring)
            wait_until(lambda: len(os.listdir(marks)) >= 6 and _all_running(pool, 3), 120,
                       0.2, "six tasks started, three workers running")
            burst = [_run(["sbatch", "--parsable", "-p", "urgent", "-N1", "-n1",
                           f"--cpus-per-task={cpus}", "-o", "/dev/null", "--wrap", "sleep 12"])
                     for _ in NODES]
            assert all(cp.returncode == 0 for cp in burst), [cp.stderr for cp in burst]
            wait_until(lambda: all(w.state == "starting" for w in pool.status().workers),
                       60, 0.2, "every worker preempted, its replacement waiting")
            done_during_burst = len(os.listdir(marks))
            got = result.get(timeout=300)
            took = time.monotonic() - started
            status = pool.status()
    assert got == list(range(60))
    runs = starts(marks)
    assert sorted(runs) == list(range(60))
    assert all(len(r) == 1 for r in runs.values()), runs  # none started twice
    assert status.retried == 0 and done_during_burst < 60
    records = [r for r in caplog.records if r.name == "fiber"]
    assert not [r for r in records if r.levelname == "WARNING"], [r.getMessage() for r in records]
    retired = [r for r in records if " retires: " in r.getMessage()]
    assert len(retired) == 3, [r.getMessage() for r in records]
    print(f"60 tasks of 1 s on Pool(3) in {partition}, every worker preempted after "
          f"{done_during_burst} had started: {took:.0f} s; {retired[0].getMessage()}")
    _wait_nodes_idle()


def test_a_process_its_cluster_ends_says_so_and_why(slurm, caplog):
    """Issue 29: a Process (not a pool worker) that its cluster ends keeps the exit code
    multiprocessing would give, and one WARNING names the job, its node and the cluster's
    reason: ``scancel`` by someone else, and preemption by a job of the higher-priority
    partition "urgent" on its node. A Process that ends by its own code (an exit code, as
    asked by ``terminate``) gets no warning."""
    def running(p: Any) -> None:
        wait_until(lambda: p.host, 60, 0.05, f"{p.name} running")

    with fiber.config.override(log_level="info"):
        cancelled = slurm.Process(target=slurm_targets.sleep, args=(120,))
        preempted = slurm.Process(target=slurm_targets.sleep, args=(120,))
        own = slurm.Process(target=slurm_targets.exit_with, args=(3,))
        asked = slurm.Process(target=slurm_targets.sleep, args=(120,))
        for p in (cancelled, preempted, own, asked):
            p.start()
        for p in (cancelled, preempted, asked):
            running(p)
        assert _run(["scancel", cancelled.job_id]).returncode == 0
        burst = _run(["sbatch", "--parsable", "-p", "urgent", "-N1", "-n1", "-w", preempted.host,
                      f"--cpus-per-task={_node_cpus()}", "-o", "/dev/null", "--wrap", "sleep 3"])
        assert burst.returncode == 0, burst.stderr
        asked.terminate()
        for p in (cancelled, preempted, own, asked):
            p.join(90)
    assert cancelled.exitcode == -15 and own.exitcode == 3 and asked.exitcode == -15
    assert preempted.exitcode is not None and preempted.exitcode != 0
    warned = [r.getMessage() for r in caplog.records
              if r.name == "fiber" and r.levelname == "WARNING"]
    about = {p.name: [w for w in warned if w.startswith(f"{p.name} (")]
             for p in (cancelled, preempted, own, asked)}
    assert about[own.name] == [] and about[asked.name] == [], warned
    (said,) = about[cancelled.name]
    assert f"(job {cancelled.job_id} on {cancelled.host})" in said and "scancel" in said, said
    (said,) = about[preempted.name]
    assert f"on {preempted.host}" in said and "PREEMPTED" in said, said
    print("\n".join(about[cancelled.name] + about[preempted.name]))
    _wait_nodes_idle()


def test_master_sigkilled_every_job_gone_within_30s(cluster):
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "sk_master_killed.py")],
                            env=_scenario_env(), cwd=SCRIPTS, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 120
        while not line.startswith("RESULT ") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        r = _result(line, "" if proc.poll() is None else proc.stderr.read())  # type: ignore
        ids = r["job_ids"]
        assert len(ids) == 9 and r["hosts"]
        assert _live_jobs(ids), "the jobs should be alive before the kill"
        proc.kill()
        proc.wait(30)
        t = time.monotonic()
        while _live_jobs(ids):
            assert time.monotonic() - t < 30, f"jobs alive 30 s after SIGKILL: {_live_jobs(ids)}"
            time.sleep(0.2)
        print(f"all {len(ids)} jobs gone {time.monotonic() - t:.1f} s after the master's SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    _wait_nodes_idle()


@pytest.mark.parametrize("how", ["normal", "exception"])
def test_master_exit_cancels_its_jobs(cluster, how):
    cp = _run([sys.executable, os.path.join(SCRIPTS, "sk_exit_cleanup.py"), how], timeout=180,
              env=_scenario_env(), cwd=SCRIPTS)
    r = _result(cp.stdout, cp.stderr, cp.returncode)
    assert cp.returncode == (0 if how == "normal" else 1), cp.stderr
    assert r["states"] == ["RUNNING", "PENDING"]
    # cancelled before the master's exit returned (COMPLETING: Slurm is still reaping)
    assert all(line.endswith("COMPLETING") for line in _live_jobs(r["job_ids"]))
    deadline = time.monotonic() + 30
    while _live_jobs(r["job_ids"]):
        assert time.monotonic() < deadline, _live_jobs(r["job_ids"])
        time.sleep(0.2)
    shown = _run(["squeue", "-h", "-t", "all", "-j", ",".join(r["job_ids"]), "-o", "%T"]).stdout
    assert shown.split() == ["CANCELLED", "CANCELLED"]


def test_fiber_run_runs_the_program_as_a_batch_job_and_follows_its_output(cluster):
    r = fiber_cli("run", "-b", "slurm", "-c", "pool_prefetch=5", "--", sys.executable, MAIN,
                  "3", timeout=600)
    assert r.returncode == 3, r.stderr
    got = tagged(r.stdout, "RESULT")  # read from the job's output file as it grew
    assert got["squares"] == [x * x for x in range(20)]
    assert got["backend"] == "slurm" and got["prefetch"] == 5  # the command's config
    job = started_job(r.stderr)
    assert job.isdigit() and f"{job} failed" in r.stderr and "exit code 3" in r.stderr
    assert len(got["workers"]) == 2  # its pool: Slurm jobs of their own
    _wait_nodes_idle()


def test_fiber_run_detached_then_ps_logs_and_stop(cluster):
    """A detached program and its pool are this user's fiber jobs on the cluster: listed by
    program (their comment), their output read from the job's file, all cancelled by the
    main job's id; Slurm lists them as cancelled afterwards, and their output stays."""
    r = fiber_cli("run", "-b", "slurm", "--detach", "--", sys.executable, MAIN, "hold")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit(), r.stdout
    try:
        got = ready_and_listed("slurm", job, 3, python=sys.executable)
        assert len(got["workers"]) == 2
        program = program_of("slurm", job)
        ids = [ln.split()[0] for ln in fiber_cli("ps", "-b", "slurm", program).stdout
               .splitlines()[1:]]
        assert ids[0] == job and all(i.startswith(ids[1].split("_")[0]) for i in ids[1:])
        stop_program("slurm", job, lambda: not _live_jobs(ids))
        assert fiber_cli("ps", "-b", "slurm", program).stdout.splitlines()[1:] == []
        ps = fiber_cli("ps", "-b", "slurm", "--all", program).stdout.splitlines()[1:]
        # a worker signalled by the stop retires, and its master may replace it before
        # its own signal comes: fiber stop cancels that replacement too, and returns only
        # once every job it cancelled has ended (a CI run saw one escape, start, and fail)
        listed = {ln.split()[0]: ln.split()[2] for ln in ps}
        assert set(ids) <= set(listed) and set(listed.values()) == {"cancelled"}, ps
        tail = fiber_cli("logs", "-b", "slurm", "--tail", "2", job)  # READY, Slurm's word
        assert tail.returncode == 0 and tail.stdout.startswith("READY "), tail
        assert tail.stdout.count("\n") == 2 and f"JOB {job} ON" in tail.stdout, tail
    finally:
        _run(["scancel", job])
    # above Slurm's MaxJobId (67043328): no job of this cluster (whose FirstJobId follows
    # the clock, scripts/slurm-cluster.sh) can have it, as a CI run's job 999999 once did
    unknown = fiber_cli("logs", "-b", "slurm", "99999999")
    assert unknown.returncode == 1 and "99999999" in unknown.stderr
    _wait_nodes_idle()


def test_ctrl_c_on_fiber_run_cancels_the_programs_queued_workers(cluster):
    """With two of the three nodes taken, the program and one worker run on the third and
    the second worker waits in the queue; Ctrl-C on fiber run cancels all three, the queued
    one included (it would otherwise start, find no master and end only then)."""
    blocker = _run(["sbatch", "--parsable", "--array=0-1", f"--cpus-per-task={_node_cpus()}",
                    "-o", "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
    t = time.monotonic()
    while len(_nodes_idle()) != len(NODES) - 2:
        assert time.monotonic() - t < 60, "the blockers did not start"
        time.sleep(0.2)
    proc = fiber_popen("run", "-b", "slurm", "--", sys.executable, MAIN, "hold")
    program = ""
    try:
        line = proc.stdout.readline()  # the program went on with the one worker it got
        assert line.startswith("READY "), line + proc.stderr.read()
        job = started_job(proc.stderr.readline())
        program = program_of("slurm", job)
        ps = fiber_cli("ps", "-b", "slurm", program).stdout.splitlines()[1:]
        before = {ln.split()[0]: ln.split()[2] for ln in ps}
        assert sorted(before.values()) == ["pending", "running", "running"], ps
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()
        ps = fiber_cli("ps", "-b", "slurm", "--all", program).stdout.splitlines()[1:]
        after = {ln.split()[0]: ln.split()[2] for ln in ps}
        assert after.keys() == before.keys(), ps
        queued = [j for j, state in before.items() if state == "pending"]
        assert after[job] == after[queued[0]] == "cancelled", ps  # the queued one never ran
        # the running worker: cancelled, or ended by itself once its master was gone
        assert set(after.values()) <= {"cancelled", "failed"}, ps
    finally:
        proc.kill()
        proc.wait()
        _run(["scancel", blocker])
        if program:
            fiber_cli("stop", "-b", "slurm", program)
    _wait_nodes_idle()


def test_bad_partition_is_a_clear_submit_error(slurm):
    p = slurm.Process(target=slurm_targets.sleep, args=(0,))
    with fiber.config.override(slurm_partition="no-such-partition"):
        t = time.monotonic()
        with pytest.raises(SubmitError) as err:
            p.start()
    assert time.monotonic() - t < 10
    e = err.value
    assert "no-such-partition" in str(e) and "partition" in e.stderr
    assert e.command and e.command[0] == "sbatch" and e.returncode not in (None, 0)
    assert p not in fiber.active_children()


def _conf_with(tmp_path: Any, **replace: str) -> str:
    lines = []
    with open(os.environ["SLURM_CONF"]) as f:
        for line in f:
            key = line.split("=", 1)[0].strip()
            if key in replace:
                continue
            lines.append(line.rstrip("\n"))
    lines += [f"{k}={v}" for k, v in replace.items()]
    path = tmp_path / "slurm.conf"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_unreachable_controller_is_a_quick_submit_error(cluster, tmp_path, monkeypatch):
    spec = JobSpec(command=("true",), name="unreachable")
    # a controller port nobody listens on: sbatch gives up by itself
    monkeypatch.setenv("SLURM_CONF", _conf_with(tmp_path, SlurmctldPort="6999"))
    t = time.monotonic()
    with pytest.raises(SubmitError) as err:
        SlurmBackend().submit([spec])
    assert time.monotonic() - t < 20
    assert "Unable to contact slurm controller" in err.value.stderr
    assert err.value.command and err.value.command[0] == "sbatch"
    # a controller address that never answers: the command timeout ends the wait
    monkeypatch.setenv("SLURM_CONF", _conf_with(tmp_path, SlurmctldHost="ctl(10.201.0.99)"))
    backend = SlurmBackend()
    backend.submit_timeout = 2.0
    t = time.monotonic()
    with pytest.raises(SubmitError, match="sbatch.*no answer within 2 s|Unable to contact"):
        backend.submit([spec])
    assert time.monotonic() - t < 10


def test_child_job_starts_a_grandchild_job(slurm):
    q = slurm.Queue()
    p = slurm.Process(target=slurm_targets.start_grandchild, args=(q,))
    p.start()
    r = q.get(timeout=180)
    p.join(60)
    assert p.exitcode == 0 and r["grandchild_exitcode"] == 0
    (child_host, child_job), (grand_host, grand_job) = r["child"], r["grandchild"]
    assert child_host in NODES and grand_host in NODES
    assert child_job and grand_job and child_job != grand_job  # its own sbatch job


def test_steps_inside_an_allocation(cluster, tmp_path):
    out = tmp_path / "steps.out"
    env = {k: v for k, v in _scenario_env().items() if k != "FIBER_LISTEN_HOST"}
    cp = _run(["sbatch", "--wait", "--parsable", "-N3", "-n6", f"--output={out}",
               "--job-name=fiber-test-steps", f"--chdir={SCRIPTS}",
               f"--wrap={sys.executable} {os.path.join(SCRIPTS, 'steps_master.py')}"],
              timeout=240, env=env)
    text = out.read_text() if out.exists() else ""
    r = _result(text, cp.stderr, cp.returncode)
    assert cp.returncode == 0, text
    alloc = cp.stdout.strip().split(";")[0]
    assert r["mode"] == "steps" and r["allocation"] == alloc
    assert r["exit3"] == 3 and r["exit3_job_id"].startswith(f"{alloc}:")
    assert r["self_killed"] == -9
    assert r["kill"] == -9 and r["terminate"] == -15
    assert r["child_host_and_job"][1] == alloc  # a step of the allocation, not a new job
    assert r["pool_ok"] and r["pool_hosts"] == NODES
    # a step's line once, forwarded with its prefix: not also through srun's own stdout
    assert text.count("a-step-says-hello") == 1, text
    assert re.search(r"^\(Process-\d+@node\d\) a-step-says-hello$", text, re.M), text
    _wait_nodes_idle()


@pytest.mark.parametrize("per_job", [1, 2])
def test_a_pool_terminated_as_it_starts_ends_at_once(slurm, per_job):
    """A pool terminated right after it was made, while its jobs are pending: its jobs
    are cancelled and counted as ended at once. Before, Slurm dropped a cancelled pending
    job from squeue before it was ever listed, and fiber waited a minute for a job it
    had not seen (as for a job it did not know) before terminate() returned."""
    for _ in range(3):
        started = time.monotonic()
        pool = slurm.Pool(4, cpu=1 / 32, workers_per_job=per_job)
        pool.terminate()
        took = time.monotonic() - started
        assert took < 20, f"terminate() took {took:.0f} s"
    _wait_nodes_idle()
