"""The program's secret never shows on a job's command line, on every backend."""

from __future__ import annotations

import fiber


def test_secret_not_on_command_line(ctx):
    from fiber.backends import register_backend
    from fiber.backends.local import LocalBackend

    seen = []

    class Spy(LocalBackend):
        name = "spy"

        def submit(self, specs):
            seen.extend(specs)
            return super().submit(specs)

    register_backend("spy", Spy)
    p = fiber.get_context("spy").Process(target=print)
    p.start()
    p.join(60)
    secret = fiber.current_process().authkey.hex()
    assert seen and all(secret not in " ".join(s.command) for s in seen)
    assert "FIBER_SECRET" in seen[0].env  # handed over through the environment only
