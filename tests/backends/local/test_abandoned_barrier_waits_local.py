"""A ``Barrier.wait`` abandoned by an exception its SIGALRM handler raises withdraws its
party, as ``threading.Barrier``'s does (``count -= 1`` in a ``finally``): the barrier is not
broken, and passes only once ``parties`` waits that were not abandoned have come. A wait
released just before its caller gave up leaves the others as they are. The abandoning
party is in a job or in the barrier's creator process; each scenario is run on
``threading.Barrier`` too, which must see the same. Real jobs of the local backend, real
signals."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, Callable, Iterator, List, Optional

from test_abandoned_gets_local import _alarm

import fiber
from fiber._core._clients import get_client
from fiber._core._served import Wait
from fiber.synchronize._barrier import BarrierOps
from fiber.testing.conformance.support.waiting import wait_until
from fiber.transport.client import Cancel

WAIT_S = 60  # a deadline for every wait that must end


class Arrival:
    """A party that waits at ``barrier`` on a thread of this process."""

    def __init__(self, barrier: Any) -> None:
        self.result: List[Any] = []
        self._thread = threading.Thread(target=self._wait, args=(barrier,), daemon=True)
        self._thread.start()

    def _wait(self, barrier: Any) -> None:
        try:
            self.result.append(barrier.wait(timeout=WAIT_S))
        except BaseException as e:  # noqa: BLE001 (reported to the test)
            self.result.append(repr(e))

    def passed(self, timeout: float) -> Any:
        """Its index once it passed, within ``timeout`` s; None if it still waits."""
        self._thread.join(timeout)
        return None if self._thread.is_alive() else self.result[0]


@contextlib.contextmanager
def _alarm_here(first: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """This process's SIGALRM handler raises TimeoutError 0.5 s from now (calling
    ``first()`` first, then sleeping 0.5 s); the default handler is back afterwards."""
    try:
        _alarm("TimeoutError", first)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _abandon_here(barrier: Any, first: Optional[Callable[[], None]] = None) -> str:
    with _alarm_here(first):
        try:
            barrier.wait()
            return "passed"
        except TimeoutError:
            return "caught"


def wait_until_alarm(barrier: Any, out: Any, tell_first: bool) -> None:
    """A job's party, whose wait is abandoned by its alarm handler (which, with
    ``tell_first``, tells the test to arrive first and leaves the hub time to answer)."""
    out.qsize()  # connected to the hub (which serves the barrier too) before the alarm
    first = (lambda: out.put("arrive")) if tell_first else None
    _alarm("TimeoutError", first)
    try:
        barrier.wait()
        out.put("passed")
    except TimeoutError:
        out.put("caught")
    except BaseException as e:  # noqa: BLE001 (reported to the test)
        out.put(repr(e))
    time.sleep(120)  # alive, and not reading its connection to the hub


def _the_others_need_every_party(barrier: Any) -> None:
    """After one party of three withdrew: two arrivals do not pass, a third passes all."""
    first, second = Arrival(barrier), Arrival(barrier)
    wait_until(lambda: barrier.n_waiting == 2 or first.passed(0) is not None, WAIT_S)
    assert first.passed(0.5) is None and second.passed(0) is None, \
        "two arrivals passed a barrier of three: the abandoned wait was counted"
    assert barrier.n_waiting == 2 and not barrier.broken
    third = Arrival(barrier)
    assert sorted([a.passed(WAIT_S) for a in (first, second, third)], key=str) == [0, 1, 2]
    assert not barrier.broken and barrier.n_waiting == 0


def test_threading_withdraws_an_abandoned_party():
    """The behaviour matched: threading.Barrier, its main thread's wait abandoned."""
    barrier = threading.Barrier(3)
    assert _abandon_here(barrier) == "caught"
    _the_others_need_every_party(barrier)


def test_a_wait_abandoned_in_a_job_withdraws_its_party():
    barrier, out = fiber.Barrier(3), fiber.Queue()
    p = fiber.Process(target=wait_until_alarm, args=(barrier, out, False))
    p.start()
    try:
        assert out.get(timeout=WAIT_S) == "caught"
        _the_others_need_every_party(barrier)
    finally:
        barrier.abort()  # (releases the arrivals of a failed test)
        p.terminate()
        p.join(30)


def test_a_wait_abandoned_in_the_creator_process_withdraws_its_party():
    barrier = fiber.Barrier(3)
    try:
        assert _abandon_here(barrier) == "caught"
        _the_others_need_every_party(barrier)
    finally:
        barrier.abort()


def _a_released_party_changed_nothing(barrier: Any, index: object) -> None:
    """The wait this process made passed the barrier of two with the abandoning party,
    which was released: nothing is broken or counted, and the next round needs two."""
    assert index in (0, 1)
    assert not barrier.broken and barrier.n_waiting == 0
    first = Arrival(barrier)
    assert first.passed(0.5) is None, "one arrival passed a barrier of two"
    second = Arrival(barrier)
    assert sorted([first.passed(WAIT_S), second.passed(WAIT_S)], key=str) == [0, 1]


def test_threading_a_wait_released_before_its_abandon_changes_nothing():
    barrier = threading.Barrier(2)
    other: List[Arrival] = []
    assert _abandon_here(barrier, lambda: other.append(Arrival(barrier))) == "caught"
    _a_released_party_changed_nothing(barrier, other[0].passed(WAIT_S))


def test_a_wait_released_before_its_abandon_changes_nothing():
    """The job's wait is answered (the barrier passed) just before its handler raises:
    its withdraw comes after the pass, and takes nothing from the next round."""
    barrier, out = fiber.Barrier(2), fiber.Queue()
    p = fiber.Process(target=wait_until_alarm, args=(barrier, out, True))
    p.start()
    try:
        assert out.get(timeout=WAIT_S) == "arrive"
        index = barrier.wait(timeout=WAIT_S)
        assert out.get(timeout=WAIT_S) == "caught"
        _a_released_party_changed_nothing(barrier, index)
    finally:
        barrier.abort()
        p.terminate()
        p.join(30)


def _last_arrival_gives_up(barrier: Any, before: Callable[[], object] = lambda: None) -> None:
    """This thread arrives last and is answered ``action``; ``before()``, then its wait
    is withdrawn, as a caller that gave up before it took that answer withdraws it."""
    client, answers = get_client(barrier._address), []  # noqa: SLF001
    req_id = client.start(barrier._name, BarrierOps.WAIT,  # noqa: SLF001
                          Wait.of(True, None).frames(), lambda s, f: answers.append(s))
    assert answers == [b"action"]
    before()
    client.request(barrier._name, BarrierOps.ABANDON, Cancel(req_id).frames())  # noqa: SLF001


def test_a_last_arrival_abandoned_before_its_action_is_withdrawn():
    """The last arrival, answered ``action``, gives up before it took the answer (its
    withdraw comes, on its connection, after the answer): it runs no action, and the
    barrier waits for another last arrival, which runs it, rather than for ever. Played
    with the barrier's protocol: the window is too short for a signal to hit it."""
    ran: List[str] = []
    barrier = fiber.Barrier(2, action=lambda: ran.append("action"))
    try:
        first = Arrival(barrier)
        wait_until(lambda: barrier.n_waiting == 1, WAIT_S)
        _last_arrival_gives_up(barrier)
        assert first.passed(0.5) is None and barrier.n_waiting == 1 and not barrier.broken
        second = Arrival(barrier)
        assert sorted([first.passed(WAIT_S), second.passed(WAIT_S)], key=str) == [0, 1]
        assert ran == ["action"]
    finally:
        barrier.abort()


def test_a_last_arrival_withdrawn_after_an_abort_counts_nothing():
    """Aborted while its action was due, the barrier stays broken with no one waiting
    (not -1) when that last arrival's wait is withdrawn, and a reset makes it whole."""
    barrier = fiber.Barrier(2, action=lambda: None)
    first = Arrival(barrier)
    wait_until(lambda: barrier.n_waiting == 1, WAIT_S)
    _last_arrival_gives_up(barrier, barrier.abort)
    assert first.passed(WAIT_S) == "BrokenBarrierError()"
    assert barrier.broken and barrier.n_waiting == 0
    barrier.reset()
    arrivals = [Arrival(barrier), Arrival(barrier)]
    assert sorted([a.passed(WAIT_S) for a in arrivals], key=str) == [0, 1]
