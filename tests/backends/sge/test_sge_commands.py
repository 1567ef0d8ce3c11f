"""The ``sge`` backend without a cluster: what Grid Engine's commands print, read; the
commands the backend runs, against fake ``qsub``/``qstat``/``qacct``/``qdel`` on ``PATH``;
its settings. The tests on a real Grid Engine cluster are in test_sge_cluster.py."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from typing import Any, Iterator, List, Optional

import pytest

import fiber
from fiber.backends import JobSpec, JobState, Resources, get_backend
from fiber.backends._batch import render_script, split_env
from fiber.backends.sge import PROGRAM_ENV, SgeBackend
from fiber.backends.sge import _backend as sge_backend
from fiber.backends.sge._jobs import last_lines, state_word, user
from fiber.backends.sge._settings import time_limit_seconds
from fiber.backends.sge._status import (
    Acct,
    Row,
    acct_status,
    context_arg,
    live_status,
    parse_contexts,
    parse_qacct,
    parse_qstat,
    parse_tasks,
    split_id,
    task_expressions,
)
from fiber.errors import BackendError, ConfigError, SubmitError

# -- what the commands print ------------------------------------------------------------

QSTAT_F = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <Queue-List>
      <name>all.q@node1</name>
      <slots_used>1</slots_used>
      <job_list state="running">
        <JB_job_number>101</JB_job_number>
        <JB_name>fiber-PoolWorker</JB_name>
        <JB_owner>root</JB_owner>
        <state>r</state>
        <JAT_start_time>2026-11-26T06:33:19</JAT_start_time>
        <slots>1</slots>
        <tasks>1</tasks>
      </job_list>
    </Queue-List>
    <Queue-List>
      <name>all.q@node2</name>
      <arch>lx-amd64</arch>
      <state>u</state>
      <job_list state="running">
        <JB_job_number>101</JB_job_number>
        <JB_name>fiber-PoolWorker</JB_name>
        <state>r</state>
        <tasks>2</tasks>
      </job_list>
    </Queue-List>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>101</JB_job_number>
      <JB_name>fiber-PoolWorker</JB_name>
      <state>qw</state>
      <JB_submission_time>2026-11-26T06:33:18</JB_submission_time>
      <queue_name></queue_name>
      <tasks>3-5:1,7</tasks>
    </job_list>
    <job_list state="pending">
      <JB_job_number>103</JB_job_number>
      <JB_name>fiber-broken</JB_name>
      <state>Eqw</state>
      <queue_name></queue_name>
    </job_list>
  </job_info>
</job_info>
"""

QACCT = """==============================================================
qname        all.q
hostname     node3
jobname      fiber-Process-1
jobnumber    102
taskid       undefined
failed       0
exit_status  3
==============================================================
qname        all.q
hostname     node2
jobnumber    104
taskid       2
failed       100  : assumedly after job
exit_status  137                  (Killed)
==============================================================
hostname     node1
jobnumber    104
taskid       3
failed       37  : qmaster enforced h_rt, h_cpu, or h_vmem limit
exit_status  0
"""


def test_task_ids_and_qdel_ranges():
    assert parse_tasks("5") == (5,)
    assert parse_tasks("6-9:1") == (6, 7, 8, 9)
    assert parse_tasks("1-5:2,8") == (1, 3, 5, 8)
    with pytest.raises(ValueError):
        parse_tasks("1-x")
    assert split_id("12") == ("12", None) and split_id("12.4") == ("12", 4)
    with pytest.raises(ValueError, match="not a Grid Engine job id"):
        split_id("12_4")
    # qdel takes a job's tasks as ranges: a pool's 128 workers are one argument
    assert task_expressions([f"7.{i}" for i in range(1, 129)]) == ["7.1-128"]
    assert task_expressions(["5.1", "5.2", "9", "5.4", "8.3", "5.5"]) == [
        "5.1-2", "5.4-5", "9", "8.3"]
    assert task_expressions([]) == []


def test_qstat_listing_with_queue_states():
    rows = parse_qstat(QSTAT_F)
    by = {(r.job, r.tasks): r for r in rows}
    assert by[("101", (1,))].queue == "all.q@node1" and by[("101", (1,))].queue_state == ""
    assert by[("101", (2,))].queue_state == "u"
    pending = by[("101", (3, 4, 5, 7))]
    assert pending.state == "qw" and pending.queue == ""
    assert by[("103", ())].state == "Eqw"
    plain = parse_qstat(QSTAT_F.replace("<Queue-List>", "<x>").replace("</Queue-List>", "</x>"))
    assert len(plain) == len(rows)  # qstat without -f: the same jobs
    assert parse_qstat("") == [] and parse_qstat("<job_info></job_info>") == []
    with pytest.raises(ValueError, match="no XML"):
        parse_qstat("error: commlib error: got select error (Connection refused)")


def _row(state: str, queue: str = "", queue_state: str = "") -> Row:
    return Row("1", (), state, "x", queue, queue_state, "")


def test_states_map_to_job_states():
    assert live_status(_row("qw")).state == JobState.PENDING
    assert live_status(_row("hqw")).state == JobState.PENDING
    running = live_status(_row("r", "all.q@node1"))
    assert running.state == JobState.RUNNING and "node1" in running.reason
    assert live_status(_row("t", "all.q@node1")).state == JobState.RUNNING
    assert live_status(_row("dr", "all.q@node1")).state == JobState.RUNNING  # until gone
    assert live_status(_row("s", "all.q@node1")).state == JobState.RUNNING
    lost = live_status(_row("r", "all.q@node2", "au"))
    assert lost.state == JobState.LOST and lost.exitcode is None
    assert "node2" in lost.reason and "stopped answering" in lost.reason
    error = live_status(_row("Eqw"))
    assert error.state == JobState.FAILED and "Eqw" in error.reason
    assert live_status(_row("r", "all.q@node1", "d")).state == JobState.RUNNING  # disabled
    assert [state_word(s) for s in ("qw", "hqw", "r", "t", "dr", "Eqw", "")] == [
        "pending", "held", "running", "starting", "deleting", "error", "unknown"]


def test_accounting_records_and_exit_codes():
    recs = parse_qacct(QACCT)
    assert recs[0] == Acct("102", None, "node3", 0, "", 3)
    assert recs[1] == Acct("104", 2, "node2", 100, "assumedly after job", 137)
    assert recs[2].failed == 37 and "h_rt" in recs[2].failed_text
    assert parse_qacct("error: job id 9 not found\n") == []
    ok = acct_status(Acct("1", None, "n", 0, "", 0))
    assert (ok.state, ok.exitcode) == (JobState.SUCCEEDED, 0)
    three = acct_status(recs[0])
    assert (three.state, three.exitcode) == (JobState.FAILED, 3)
    killed = acct_status(Acct("1", None, "n", 0, "", 128 + 9))  # Python SIGKILLed
    assert (killed.state, killed.exitcode) == (JobState.FAILED, -9)
    assert "SIGKILL" in killed.reason
    # failed 100 "assumedly after job": a signal ended it, nothing of Grid Engine failed
    assert (acct_status(recs[1]).exitcode, acct_status(recs[1]).reason) == (-9, "killed by SIGKILL")
    limit = acct_status(recs[2])  # the qmaster's limit: killed
    assert (limit.state, limit.exitcode) == (JobState.FAILED, -9) and "h_rt" in limit.reason
    term = acct_status(recs[1], cancelled="term")
    assert (term.state, term.exitcode) == (JobState.CANCELLED, -signal.SIGTERM)
    assert acct_status(recs[1], cancelled="kill").exitcode == -signal.SIGKILL
    assert acct_status(recs[1], deleted=True).reason == "deleted (qdel)"


def test_context_names_the_program_and_the_job():
    arg = context_arg("ab12", "fiber run: python3 x.py a,b\n c=d")
    assert arg.startswith("fiber_program=ab12,fiber_name=") and arg.count(",") == 1
    value = arg.split("fiber_name=", 1)[1]
    xml = f"""<?xml version='1.0'?>
<detailed_job_info><djob_info>
  <element><JB_job_number>7</JB_job_number><JB_submission_time>1795674897</JB_submission_time>
    <JB_ja_tasks><ulong_sublist><JAT_task_number>1</JAT_task_number></ulong_sublist></JB_ja_tasks>
    <JB_context>
      <context_list><VA_variable>fiber_program</VA_variable><VA_value>ab12</VA_value></context_list>
      <context_list><VA_variable>fiber_name</VA_variable><VA_value>{value}</VA_value></context_list>
    </JB_context></element>
  <element><JB_job_number>8</JB_job_number><JB_submission_time>1</JB_submission_time></element>
</djob_info></detailed_job_info>"""
    found = parse_contexts(xml)
    assert list(found) == ["7"]  # job 8 is someone's own: left out
    assert found["7"].program == "ab12"
    assert found["7"].name == "fiber run: python3 x.py a,b c=d"
    assert found["7"].submitted == "2026-11-26T06:34:57Z"
    assert last_lines("a\nb\nc\n", 2) == "b\nc\n" and last_lines("a\n", 0) == ""


def test_job_script_exports_each_tasks_environment(tmp_path):
    """Grid Engine numbers an array job's tasks from 1 ($SGE_TASK_ID)."""
    envs = [{"FIBER_SECRET": "s3cret", "FIBER_JOB": f"tok{i}"} for i in range(3)]
    common, own = split_env(envs)
    script = render_script(["env"], common, own, index_var="SGE_TASK_ID", first_index=1)
    assert script.count("s3cret") == 1
    path = tmp_path / "job.sh"
    path.write_text(script)
    for task in (1, 2, 3):
        out = subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=30,
                             env={"SGE_TASK_ID": str(task), "PATH": os.environ["PATH"]})
        assert f"FIBER_JOB=tok{task - 1}" in out.stdout.splitlines(), out
    bad = subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=30,
                         env={"SGE_TASK_ID": "0", "PATH": os.environ["PATH"]})
    assert bad.returncode == 2 and "no job" in bad.stderr


# -- the commands it runs (fake Grid Engine) ---------------------------------------------

_FAKE = {
    "qsub": """#!/bin/sh
n=$(cat "$FAKE_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$FAKE_DIR/count"
printf '%s\\n' "$@" > "$FAKE_DIR/qsub.$n.argv"
cat > "$FAKE_DIR/qsub.$n.script"
if [ -n "$FAKE_QSUB_FAIL" ]; then echo "$FAKE_QSUB_FAIL" >&2; exit 1; fi
if [ -n "$FAKE_SLEEP" ]; then sleep "$FAKE_SLEEP"; fi
case " $* " in *" -t "*) echo "$((100 + n)).1-9:1" ;; *) echo "$((100 + n))" ;; esac
""",
    "qstat": """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/qstat.log"
if [ "$1" = -j ]; then cat "$FAKE_DIR/qstat-j.out" 2>/dev/null; exit 0; fi
cat "$FAKE_DIR/qstat.xml" 2>/dev/null || echo "<job_info></job_info>"
""",
    "qacct": """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/qacct.log"
for a; do last=$a; done
if [ -f "$FAKE_DIR/qacct.$last" ]; then cat "$FAKE_DIR/qacct.$last"; exit 0; fi
echo "error: job id $last not found" >&2; exit 1
""",
    "qdel": """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DIR/qdel.log"
if [ -n "$FAKE_QDEL_DENY_FORCE" ] && [ "$1" = -f ]; then
  echo "root - you do not have the necessary privileges to force delete jobs"; exit 1; fi
if [ -n "$FAKE_QDEL_FAIL" ]; then echo "$FAKE_QDEL_FAIL" >&2; exit 1; fi
""",
}


class FakeSgeBackend(SgeBackend):
    """A backend whose exit hook is removed after the test (its jobs are fake)."""

    made: List[SgeBackend] = []

    def __init__(self) -> None:
        super().__init__()
        FakeSgeBackend.made.append(self)


@pytest.fixture
def fake_sge(tmp_path, monkeypatch) -> Iterator[Any]:
    """Fake Grid Engine commands on PATH; they record their arguments in ``tmp_path``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in _FAKE.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    try:
        with fiber.config.override(sge_output_dir=str(tmp_path / "logs")):
            yield tmp_path
    finally:
        for b in FakeSgeBackend.made:
            atexit.unregister(b.cancel_unfinished)
        FakeSgeBackend.made.clear()


def _argv(d: Any, n: int) -> List[str]:
    return (d / f"qsub.{n}.argv").read_text().split("\n")[:-1]


def _after(argv: List[str], flag: str) -> List[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def _spec(i: int, resources=Resources(cpu=1), name: Optional[str] = None) -> JobSpec:
    return JobSpec(command=("python", "-m", "fiber.process._bootstrap"), resources=resources,
                   name=name or f"PoolWorker-{i}",
                   env={"FIBER_PARENT": "tcp://10.0.0.1:5000", "FIBER_JOB": f"{i:032x}",
                        "FIBER_SECRET": "ab" * 32})


def test_qsub_command_lines_arrays_resources_and_secrets(fake_sge):
    b = FakeSgeBackend()
    with fiber.config.override(sge_queue="gpu.q", sge_project="ml", sge_pe="smp",
                               sge_time_limit="1:00:00", sge_job_name_prefix="rl",
                               sge_extra_args="-l 'arch=lx-amd64' -R y"):
        handles = b.submit([_spec(i) for i in range(3)]
                           + [_spec(9, Resources(cpu=1.5, memory_mb=3000, gpu=1), "trainer")])
        assert b.job_time_limit() == 3600.0
    assert [h.job_id for h in handles] == ["101.1", "101.2", "101.3", "102"]
    assert all(h.pid is None and h.backend == "sge" for h in handles)
    array, single = _argv(fake_sge, 1), _argv(fake_sge, 2)
    for argv in (array, single):
        assert argv[0] == "-terse" and _after(argv, "-C") == [""]  # no #$ directives
        assert _after(argv, "-S") == ["/bin/sh"] and _after(argv, "-r") == ["n"]
        assert _after(argv, "-q") == ["gpu.q"] and _after(argv, "-P") == ["ml"]
        # a directory per program: ids start again after a cluster's reset
        assert _after(argv, "-o") == [str(fake_sge / "logs" / b.program)]
        assert _after(argv, "-j") == ["y"]
        assert "-V" in argv and argv[-3:] == ["arch=lx-amd64", "-R", "y"]
        assert "-notify" in argv  # a time limit: SIGUSR2 before SIGKILL (a worker retires)
        assert _after(argv, "-ac")[0].startswith(f"fiber_program={b.program},fiber_name=")
        assert not any("ab" * 32 in a or "FIBER_JOB" in a for a in argv)  # no secrets
    assert _after(array, "-t") == ["1-3"] and _after(single, "-t") == []
    assert _after(array, "-N") == ["rl-PoolWorker"] and _after(single, "-N") == ["rl-trainer"]
    assert "-pe" not in array and single[single.index("-pe"):][:3] == ["-pe", "smp", "2"]
    assert _after(array, "-l") == ["h_rt=1:00:00", "arch=lx-amd64"]
    # memory is per slot in Grid Engine: 3000 MB over 2 slots
    assert _after(single, "-l") == ["h_vmem=1500M", "gpu=1", "h_rt=1:00:00", "arch=lx-amd64"]
    script = (fake_sge / "qsub.1.script").read_text()
    assert script.count("ab" * 32) == 1 and 'case "${SGE_TASK_ID:-}" in' in script
    assert f"  1) export FIBER_JOB={0:032x}" in script
    assert f"  3) export FIBER_JOB={2:032x}" in script
    assert f"export {PROGRAM_ENV}={b.program}" in script
    assert script.rstrip().endswith("exec python -m fiber.process._bootstrap")
    assert not any(line.startswith("#$") for line in script.splitlines())


def test_resources_without_a_way_to_ask_are_refused(fake_sge):
    b = FakeSgeBackend()
    with pytest.raises(SubmitError, match="asks for 2 CPUs.*set sge_pe"):
        b.submit([_spec(1, Resources(cpu=2), "wide")])
    with fiber.config.override(sge_gpu_resource=""), \
            pytest.raises(SubmitError, match="asks for 1 GPUs.*sge_gpu_resource"):
        b.submit([_spec(1, Resources(gpu=1), "g")])
    assert not (fake_sge / "qsub.1.argv").exists()  # nothing was submitted
    with fiber.config.override(sge_memory_resource="mem_free", sge_export_env=False):
        b.submit([_spec(1, Resources(memory_mb=512), "m")])
    argv = _argv(fake_sge, 1)
    assert _after(argv, "-l") == ["mem_free=512M"] and "-V" not in argv
    with fiber.config.override(sge_memory_resource=""):
        b.submit([_spec(1, Resources(memory_mb=512), "m")])
    assert _after(_argv(fake_sge, 2), "-l") == []  # memory not asked for, as configured


def test_status_is_one_qstat_call_then_qacct_for_ended_jobs(fake_sge, monkeypatch):
    b = FakeSgeBackend()
    handles = b.submit([_spec(i) for i in range(9)])  # 101.1-9
    single = b.submit([_spec(1, name="solo")])[0]  # 102
    (fake_sge / "qstat.xml").write_text(QSTAT_F)
    (fake_sge / "qacct.102").write_text(QACCT)
    st = b.status(handles[:7] + [single])
    calls = (fake_sge / "qstat.log").read_text().splitlines()
    assert calls == [f"-f -ne -u {user()} -xml"]  # one qstat for all jobs
    assert st["101.1"].state == JobState.RUNNING and handles[0].host == "node1"
    assert st["101.2"].state == JobState.LOST and "node2" in st["101.2"].reason
    assert handles[1].host == "node2"
    assert [st[f"101.{i}"].state for i in (3, 4, 5, 7)] == [JobState.PENDING] * 4
    assert st["101.6"].state == JobState.PENDING  # not listed, just submitted: not yet
    assert (st["102"].state, st["102"].exitcode) == (JobState.FAILED, 3)
    assert single.host == "node3"  # from its accounting record
    # the lost node's job is deleted, forcibly (it would stay "r" in qstat)
    assert (fake_sge / "qdel.log").read_text().splitlines() == ["-f 101.2"]
    assert (fake_sge / "qacct.log").read_text().splitlines() == ["-j 101", "-j 102"]
    # final states are not asked again; cancel is one qdel, an array's tasks as ranges
    b.cancel(handles)
    assert (fake_sge / "qdel.log").read_text().splitlines()[-1] == "101.1 101.3-9"
    (fake_sge / "qstat.xml").write_text("<job_info></job_info>")
    st = b.status(handles + [single])
    assert st["101.2"].state == JobState.LOST and st["102"].exitcode == 3
    assert (st["101.1"].state, st["101.1"].exitcode) == (JobState.CANCELLED, -signal.SIGTERM)
    assert len((fake_sge / "qstat.log").read_text().splitlines()) == 2
    b.cancel_unfinished()  # at exit: nothing is left unfinished, and nothing is listed
    assert len((fake_sge / "qdel.log").read_text().splitlines()) == 2


def test_a_failed_qdel_leaves_the_job_uncancelled(fake_sge, monkeypatch):
    """A qdel that fails raises, and its jobs are not taken for cancelled: the job's end,
    when Grid Engine reports it, is its own (here its accounting record's exit code),
    not a cancellation that never happened."""
    b = FakeSgeBackend()
    (h,) = b.submit([_spec(1, name="solo")])  # 101
    monkeypatch.setenv("FAKE_QDEL_FAIL", "error: failed receiving gdi request")
    with pytest.raises(SubmitError, match="qdel failed"):
        b.cancel([h])
    (fake_sge / "qacct.101").write_text(QACCT.replace("jobnumber    102", "jobnumber    101"))
    st = b.status([h])[h.job_id]  # gone from qstat: ended, as its record says
    assert (st.state, st.exitcode) == (JobState.FAILED, 3), st


def test_a_job_gone_from_qstat_waits_for_its_accounting_record(fake_sge, monkeypatch):
    b = FakeSgeBackend()
    (h,) = b.submit([_spec(1)])
    (fake_sge / "qstat.xml").write_text(QSTAT_F.replace(">101<", f">{h.job_id}<", 1)
                                        .replace("<tasks>1</tasks>", "", 1))
    assert b.status([h])[h.job_id].state == JobState.RUNNING
    (fake_sge / "qstat.xml").write_text("<job_info></job_info>")
    st = b.status([h])[h.job_id]  # ended, qacct has no record yet: still running
    assert st.state == JobState.RUNNING and "accounting" in st.reason
    assert b.status([h])[h.job_id].state == JobState.RUNNING
    assert len((fake_sge / "qacct.log").read_text().splitlines()) == 1  # not again at once
    monkeypatch.setattr(sge_backend.SgeBackend, "acct_grace", 0.0)
    time.sleep(1.1)  # (qacct is asked again after 1 s, then 2, 4, 8, 16)
    st = b.status([h])[h.job_id]
    assert st.state == JobState.LOST and "no accounting record" in st.reason
    assert len((fake_sge / "qacct.log").read_text().splitlines()) == 2


def test_error_state_is_a_failure_with_its_reason_and_the_job_deleted(fake_sge, monkeypatch):
    monkeypatch.setenv("FAKE_QDEL_DENY_FORCE", "1")
    b = FakeSgeBackend()
    b.submit([_spec(1)])  # 101
    (h,) = b.submit([_spec(1, name="broken")])  # 102
    (fake_sge / "qstat.xml").write_text(QSTAT_F.replace(">103<", ">102<"))
    (fake_sge / "qstat-j.out").write_text(
        "job_number:   102\nerror reason    1:      11/26/2026 06:40:01 [0:123]: error: "
        "can't chdir to /nonexistent: No such file or directory\n")
    st = b.status([h])[h.job_id]
    assert st.state == JobState.FAILED and "Eqw" in st.reason
    assert st.reason.endswith(": error: can't chdir to /nonexistent: No such file or directory")
    assert (fake_sge / "qdel.log").read_text().splitlines() == ["102"]
    assert b.unfinished()[0].job_id == "101"  # 102 is not deleted again at exit


def test_a_lost_job_is_deleted_without_force_where_the_user_may_not(fake_sge, monkeypatch):
    monkeypatch.setenv("FAKE_QDEL_DENY_FORCE", "1")
    b = FakeSgeBackend()
    handles = b.submit([_spec(i) for i in range(2)])
    (fake_sge / "qstat.xml").write_text(QSTAT_F)
    assert b.status(handles)["101.2"].state == JobState.LOST
    assert (fake_sge / "qdel.log").read_text().splitlines() == ["-f 101.2", "101.2"]


def test_failed_commands_raise_submit_error(fake_sge, monkeypatch):
    b = FakeSgeBackend()
    monkeypatch.setenv("FAKE_QSUB_FAIL", 'Unable to run job: Job was rejected because job '
                       'requests unknown queue "nosuch".')
    with fiber.config.override(sge_queue="nosuch"), pytest.raises(SubmitError) as err:
        b.submit([_spec(1)])
    e = err.value
    assert e.returncode == 1 and 'unknown queue "nosuch"' in e.stderr
    assert e.command and e.command[0] == "qsub" and "queue 'nosuch'" in str(e)
    monkeypatch.delenv("FAKE_QSUB_FAIL")
    monkeypatch.setenv("FAKE_SLEEP", "30")
    b.submit_timeout = 0.5
    t = time.monotonic()
    with pytest.raises(SubmitError, match="no answer within 0.5 s"):
        b.submit([_spec(1)])
    assert time.monotonic() - t < 10
    monkeypatch.setenv("PATH", str(fake_sge / "empty"))
    with pytest.raises(SubmitError, match="not found"):
        FakeSgeBackend().submit([_spec(1)])


def test_exit_hook_deletes_unfinished_jobs(fake_sge):
    b = FakeSgeBackend()
    handles = b.submit([_spec(i) for i in range(2)])
    (fake_sge / "qacct.101").write_text(QACCT.replace("104", "101").replace("102", "101"))
    (fake_sge / "qstat.xml").write_text(QSTAT_F.replace("<state>u</state>", ""))
    (fake_sge / "qstat-j.out").write_text("<detailed_job_info><djob_info/></detailed_job_info>")
    b.status(handles)
    assert [h.job_id for h in b.unfinished()] == ["101.1", "101.2"]
    b.cancel_unfinished()
    assert (fake_sge / "qdel.log").read_text().splitlines() == ["101.1-2"]


@pytest.mark.parametrize("key, value, message", [
    ("sge_time_limit", "1h", "time_limit must be seconds or"),
    ("sge_queue", "all.q gpu.q", "queue must be one name"),
    ("sge_pe", "smp,mpi", "pe must be one name"),
    ("sge_memory_resource", "h vmem", "memory_resource must be the name"),
    ("sge_extra_args", "-l 'unclosed", "extra_args cannot be split"),
    ("sge_job_name_prefix", "1fiber", "job_name_prefix must start with a letter"),
    ("sge_output_dir", "host:/logs", "output_dir cannot hold"),
])
def test_bad_settings_are_refused_naming_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message) as err:
        fiber.config.resolve({key: value}, environ={}, config_file="/none")
    assert key in str(err.value)
    env_key = "FIBER_" + key.upper()
    with pytest.raises(ConfigError, match=message):
        fiber.config.resolve({}, environ={env_key: value}, config_file="/none")


def test_config_keys_and_registry():
    cfg = fiber.config.resolve({}, environ={"FIBER_SGE_QUEUE": "all.q",
                                            "FIBER_SGE_EXPORT_ENV": "false",
                                            "FIBER_SGE_DIR": "/tmp/x"}, config_file="/none")
    assert cfg.backends["sge"] == {"queue": "all.q", "export_env": False}
    with pytest.raises(ConfigError, match="did you mean 'sge_queue'"):
        fiber.config.resolve({"sge_queu": "x"}, environ={}, config_file="/none")
    assert "sge" in fiber.backends.known_backends()
    assert isinstance(get_backend("sge"), SgeBackend)


def test_logs_are_the_newest_file_of_the_job_id(tmp_path):
    """Job ids start again when a cluster's state is reset: of several logs with a job's id
    (other programs', of an earlier cluster), ``fiber logs`` reads the one written last."""
    old = tmp_path / "aaa" / "fiber-Process-1.o7"
    new = tmp_path / "bbb" / "fiber-PoolWorker.o7"
    task = tmp_path / "bbb" / "fiber-PoolWorker.o7.2"
    for path, text in ((old, "earlier\n"), (new, "one\ntwo\nthree\n"), (task, "task 2\n")):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    os.utime(old, (time.time() - 3600,) * 2)
    b = SgeBackend()
    with fiber.config.override(sge_output_dir=str(tmp_path)):
        assert b.read_logs("7") == "one\ntwo\nthree\n"
        assert b.read_logs("7", tail=2) == "two\nthree\n"
        assert b.read_logs("7.2") == "task 2\n"
        with pytest.raises(BackendError, match="no output of Grid Engine job 8"):
            b.read_logs("8")
        with pytest.raises(BackendError, match="not a Grid Engine job id"):
            b.read_logs("*")


def test_a_program_started_by_fiber_run_has_an_id_of_its_own(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "parent12")
    backend = SgeBackend()
    assert backend.program == "parent12" and backend.inherited
    backend.main_spec(JobSpec(command=("true",)))
    assert backend.program != "parent12" and not backend.inherited


def _listen_host_error() -> str:
    with fiber.config.override(listen_host=""), pytest.raises(BackendError) as info:
        SgeBackend().listen_host()
    return str(info.value)


def test_listen_host_needs_the_qmaster_or_the_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("FIBER_LISTEN_HOST", raising=False)
    monkeypatch.delenv("SGE_ROOT", raising=False)
    monkeypatch.delenv("SGE_CELL", raising=False)
    # what is wrong, and no listen_host where it is no remedy (qsub needs the same)
    said = _listen_host_error()
    assert "SGE_ROOT is not set" in said and "settings.sh" in said
    assert "set listen_host" not in said
    monkeypatch.setenv("SGE_ROOT", str(tmp_path))
    act_qmaster = tmp_path / "default" / "common" / "act_qmaster"
    said = _listen_host_error()
    assert f"cannot read {act_qmaster} (No such file or directory)" in said
    assert "set listen_host" not in said
    act_qmaster.parent.mkdir(parents=True)
    act_qmaster.write_text("nosuchhost.invalid\n")
    said = _listen_host_error()
    assert "qmaster 'nosuchhost.invalid' does not resolve" in said
    assert str(act_qmaster) in said and "set listen_host" not in said
    act_qmaster.write_text("127.0.0.1\n")
    with fiber.config.override(listen_host=""):
        assert SgeBackend().listen_host() == "127.0.0.1"
    with fiber.config.override(listen_host="10.9.9.9"):
        assert SgeBackend().listen_host() == "10.9.9.9"


def test_without_a_time_limit_no_notify_and_no_known_end(fake_sge):
    b = FakeSgeBackend()
    b.submit([_spec(0)])
    assert "-notify" not in _argv(fake_sge, 1) and b.job_time_limit() is None


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("1:30", 90.0), ("1:00:00", 3600.0),
                                          (" 2:00 ", 120.0)])
def test_time_limit_seconds(text, seconds):
    assert time_limit_seconds(text) == seconds
