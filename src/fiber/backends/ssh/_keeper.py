"""The keeper: what the ssh backend runs on a host for each job, before fiber. It hands the
job its ``FIBER_*`` values (the secret among them) in a pipe, not in its environment, and
kills the job when its ssh session ends. Standard library only, and Python 3.9's. The
design: docs/contributing/processes.md, "The ssh keeper"."""

import json
import os
import select
import signal
import sys
from typing import Any, Dict, Optional

#: What the master sends on stdin after the launch line, one a line.
TERM = b"TERM"
KILL = b"KILL"
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Keeper:
    """One job on this host: start it, pass the master's requests on, end as it ended."""

    def __init__(self) -> None:
        self.buffer = b""
        self.pid = 0
        self.status: Optional[int] = None  # the job's wait status, once it ended
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll (the wakeup fd)
        for sig in _FORWARDED:  # sshd or a person signals the keeper: meant for the job
            signal.signal(sig, lambda signum, _: self.signal_job(signum))

    def launch_line(self) -> bytes:
        """The first line on stdin (blocking); empty if stdin ends before it."""
        while b"\n" not in self.buffer:
            data = os.read(0, 65536)
            if not data:
                return b""
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def start(self, launch: Dict[str, Any]) -> None:
        """Fork and exec the job, its values in a pipe whose number ends its command (or,
        for a command that is not fiber's, in its environment)."""
        values_r, values_w = os.pipe()
        argv = [str(a) for a in launch["argv"]]
        piped = launch.get("pipe", True)
        if piped:
            argv.append(str(values_r))
        # Blocked across the fork: a SIGTERM for the job that comes before the child has
        # reset its handlers would run this keeper's handler in the child (whose pid is
        # not known there) and be lost; blocked, it waits, and ends the child once unblocked.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)  # its group: what is left of it ends with it
                if piped:
                    os.set_inheritable(values_r, True)
                else:
                    os.environ.update(launch["env"])
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                for sig in (signal.SIGCHLD, signal.SIGPIPE) + _FORWARDED:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                os.execvp(argv[0], argv)
            except BaseException as e:
                os.write(2, f"fiber: cannot run {argv[0]} on this host: {e}\n".encode())
            os._exit(127)
        self.pid = pid
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(values_r)
        try:
            os.write(values_w, json.dumps(launch["env"]).encode())
        except OSError:
            pass  # it did not start: its exit says so
        os.close(values_w)

    def signal_job(self, sig: int, group: bool = False) -> None:
        if self.pid and self.status is None:
            try:
                if group:
                    os.killpg(self.pid, sig)
                else:
                    os.kill(self.pid, sig)
            except OSError:
                pass

    def reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 1 << 8
        if pid == self.pid:
            self.status = status

    def requests(self) -> bool:
        """Act on the master's requests that came on stdin; False at its end."""
        try:
            data = os.read(0, 65536)
        except OSError:
            data = b""
        self.buffer += data
        self.act()
        return bool(data)

    def act(self) -> None:
        """Act on the whole request lines in the buffer."""
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.strip() == TERM:
                self.signal_job(signal.SIGTERM)
            elif line.strip() == KILL:
                self.signal_job(signal.SIGKILL)

    def run(self) -> None:
        # A request may have come with the launch line, before the job existed (the
        # master's terminate() right after the start): the job exists now.
        self.act()
        poller = select.poll()
        poller.register(0, select.POLLIN)
        poller.register(1, 0)  # POLLERR: nobody reads the session's output any more
        poller.register(self.wake_r, select.POLLIN)
        while self.status is None:
            for fd, events in poller.poll():
                if fd == self.wake_r:
                    _drain(self.wake_r)
                    self.reap()
                elif fd == 0 and not self.requests():
                    poller.unregister(0)  # its writer is gone: nothing more will come
                elif fd == 1 and events & (select.POLLERR | select.POLLHUP):
                    poller.unregister(1)  # the session is gone: so is the job
                    self.signal_job(signal.SIGKILL, group=True)
        try:
            os.killpg(self.pid, signal.SIGKILL)  # its stray subprocesses would hold the
        except OSError:  # session open (they have its output pipes)
            pass

    def exit_as_the_job(self) -> None:
        status = self.status if self.status is not None else 1 << 8
        if os.WIFSIGNALED(status):
            os._exit(128 + os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status))


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass


def main() -> None:
    keeper = Keeper()
    line = keeper.launch_line()
    if not line:
        sys.exit(70)  # the master went away before it sent the job
    keeper.start(json.loads(line))
    keeper.run()
    keeper.exit_as_the_job()


if __name__ == "__main__":
    main()
