"""What a pool's job of several workers asks its cluster for (``Resources.times``)."""

from fiber.backends import Resources


def test_a_job_of_k_workers_asks_for_k_workers_resources():
    assert Resources().times(4) == Resources(cpu=4)  # a CPU a worker unless set
    assert Resources(cpu=0.5, memory_mb=300, gpu=1).times(4) == Resources(
        cpu=2.0, memory_mb=1200, gpu=4)
    assert Resources(memory_mb=100).times(1) == Resources(cpu=1, memory_mb=100)
