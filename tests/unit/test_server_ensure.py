"""A hub keeps its process's services, one each (``Server.ensure``): the first caller
makes it, every other thread gets the same one, and a name taken by another kind of
service is an error, not a silent second service. A real server, real threads."""

from __future__ import annotations

import threading
from typing import List

import pytest

from fiber.transport.operations import Service
from fiber.transport.server import Server


class Counted(Service):
    made = 0

    def __init__(self) -> None:
        Counted.made += 1


class Other(Service):
    pass


def test_one_service_a_name_whoever_asks_first():
    srv = Server("127.0.0.1", name="fiber-test-ensure")
    try:
        Counted.made = 0
        got: List[Service] = []
        start = threading.Barrier(8)

        def ask() -> None:
            start.wait()
            got.append(srv.ensure(b"counted", Counted))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert Counted.made == 1
        assert len(got) == 8 and all(s is got[0] for s in got)
        assert srv.service(b"counted") is got[0]
        made = srv.ensure(b"other", Other, lambda: Other())
        assert isinstance(made, Other) and srv.ensure(b"other", Other) is made
        with pytest.raises(TypeError, match="is Counted, not Other"):
            srv.ensure(b"counted", Other)
    finally:
        srv.close()


def test_a_new_hub_makes_its_own():
    first, second = (Server("127.0.0.1", name="fiber-test-ensure") for _ in range(2))
    try:
        assert first.ensure(b"counted", Counted) is not second.ensure(b"counted", Counted)
    finally:
        first.close()
        second.close()
