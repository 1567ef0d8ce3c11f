"""fiber's per-process state, a class a layer: the one instance of each is an attribute
of `fiber._process_state.here` (``here.transport``, ``here.jobs``, ``here.api``), so
that every piece of state a process keeps is declared, typed and described in this
package, and found from one object. The modules of each layer read and write it there;
what renews it in a forked child and what puts it back for a test stay the hooks
registered with ``here`` (``docs/contributing/processes.md``, "This process's state").

Imports nothing of fiber's at run time (types only): `_process_state` holds these.
"""
