"""fiber's transport: authenticated message sockets between the processes of a program.

Self-contained: it imports nothing of fiber but :mod:`fiber.errors`, and takes its
settings as arguments (:class:`.client.Settings`; the program's configuration is passed
by :mod:`fiber._core._clients`).

- :mod:`.server`: one listening socket and one thread serving the *services* registered
  on it; :mod:`.peers`: who sends it requests.
- :mod:`.client`: the client side (one connection per thread, an *anchor* per process).
- :mod:`.auth`: the program secret and the handshake that proves it.
- :mod:`.framing`: messages as frames on a byte stream; :mod:`.memfd`: large frames
  between processes of one host, without a copy; :mod:`.sockets`: addresses, listening,
  keepalives.
- :mod:`.serialization`: objects to frames (pickle 5, buffers out of band, ``__main__``
  by value); :mod:`.remote`: exceptions carried between processes.
- :mod:`.cpus`: whether a CPU is spare, and polling while one is.
"""
