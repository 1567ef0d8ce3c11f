"""fiber's transport: authenticated message sockets between the processes of a program.

Self-contained: of fiber it imports only leaves (`fiber.errors`, `fiber._process_state`),
and takes its settings as arguments (passed by `fiber._core._clients`).

- `server`: one listening socket and one thread serving the *services* registered
  on it; `peers`: who sends it requests.
- `client`: one connection; `channels`: each thread's, and each process's *anchor*.
- `auth`: the program secret and the handshake that proves it.
- `framing`: frames on a byte stream; `memfd`: large frames within a host, without a
  copy; `sockets`: addresses, listening, keepalives.
- `serialization`: objects to frames (pickle 5, buffers out of band, ``__main__``
  by value); `remote`: exceptions carried between processes.
- `cpus`: whether a CPU is spare, and polling while one is.
"""
