"""What a pool's job of several workers asks its cluster for (``Resources.times``)."""

from fiber.backends import Resources


def test_a_job_of_k_workers_asks_for_k_workers_resources():
    assert Resources().times(4) == Resources(cpu=4)  # a CPU a worker unless set
    assert Resources(cpu=0.5, memory_mb=300, gpu=1).times(4) == Resources(
        cpu=2.0, memory_mb=1200, gpu=4)
    assert Resources(memory_mb=100).times(1) == Resources(cpu=1, memory_mb=100)


def test_the_cpus_fiber_chose_are_marked_as_such():
    """A job of 4 workers that set no ``cpu`` asks for 4 CPUs that the program did not:
    a backend that cannot enforce CPUs has nothing to warn about (see the local
    backend's note); a ``cpu`` the program set, or a default from the config, is its."""
    assert Resources().times(4).cpu_implied
    assert not Resources(cpu=0.5).times(4).cpu_implied
    assert not Resources(cpu=2).cpu_implied
    assert Resources().times(4).merged_over(Resources(cpu=8)).cpu_implied
    assert not Resources().merged_over(Resources(cpu=8)).cpu_implied
