"""A job's forwarded lines carry the host it said it runs on (``(name@host) ``), even when
its output was opened before it said so: a job whose pipes the master reads (a local,
netns or ssh job) has its output opened at submit, naming this host, and an ssh job runs
on another (the API suite checks it end to end on the ssh backend)."""

from __future__ import annotations

from fiber.process._printer import OutputPrinter


def test_a_job_that_says_its_host_gets_it_in_its_prefix(capsys):
    printer = OutputPrinter()
    printer.open(b"job", "PoolWorker-1", "master-host", True)
    printer.write(b"job", 1, b"before\npart")
    printer.rename(b"job", "PoolWorker-1", "node2", True)
    printer.write(b"job", 1, b"ial\nafter\n")
    printer.write(b"job", 2, b"on stderr\n")
    printer.close(b"job")
    out, err = capsys.readouterr()
    assert out.splitlines() == ["(PoolWorker-1@master-host) before",
                                "(PoolWorker-1@node2) partial", "(PoolWorker-1@node2) after"]
    assert err == "(PoolWorker-1@node2) on stderr\n"


def test_renaming_a_job_without_output_or_prefix_is_harmless(capsys):
    printer = OutputPrinter()
    printer.rename(b"unknown", "Process-1", "node1", True)  # its output never opened
    printer.open(b"job", "Process-2", "here", False)
    printer.rename(b"job", "Process-2", "node1", False)
    printer.write(b"job", 1, b"plain\n")
    assert capsys.readouterr().out == "plain\n"
