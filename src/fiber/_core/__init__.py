"""fiber's core: what every object served by a process's hub shares.

- `_runtime`: this process's hub (its one authenticated server) and where it listens.
- `_served`: the picklable handle of an object served on its creator's hub.
- `_parking`: services whose requests wait in FIFO order, each with its own timeout.

Private: the API packages (``process``, ``connection``, ``queues``, ``synchronize``,
``pool``, ``managers``) build on it; it builds on ``transport`` and ``backends``.
"""
