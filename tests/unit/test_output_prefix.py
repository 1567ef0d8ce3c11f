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


def test_a_line_over_the_limit_goes_on_piece_by_piece_with_one_prefix(capsys):
    """A line longer than the printer writes whole (1 MiB) is written in pieces: cut
    between two characters (of three bytes here, sent in chunks that cut them), the
    line going on with each piece: one prefix, no end of line added, nothing replaced.
    A tagged job's line (a job of several workers) likewise, its tag made the prefix."""
    from fiber.process import _printer

    line = ("\u20ac" * (_printer._MAX_PARTIAL // 2)).encode()  # 1.5 MiB
    printer = OutputPrinter()
    printer.open(b"job", "Process-1", "node1", True)
    printer.open(b"tagged", "PoolJob-1", "node2", True, tagged=True)
    for token, head in ((b"job", b"x"), (b"tagged", b"(PoolWorker-3) x")):
        data = head + line + b" end\nnext\n"
        for i in range(0, len(data), 10_000):  # as a job's relay reads them
            printer.write(token, 1, data[i:i + 10_000])
    printer.write(b"job", 1, b"no end")
    printer.close(b"job")
    assert capsys.readouterr().out.splitlines() == [
        "(Process-1@node1) x" + line.decode() + " end", "(Process-1@node1) next",
        "(PoolWorker-3@node2) x" + line.decode() + " end", "(PoolJob-1@node2) next",
        "(Process-1@node1) no end"]
