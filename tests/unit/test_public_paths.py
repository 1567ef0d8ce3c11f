"""The public import paths of fiber, and the names its classes pickle and print under.

``PUBLIC`` is every name each public module exported when the package was reorganised
into subpackages (``fiber.pool`` holds private ``_pool``, ``_service``...), and those of
the packages made since (``fiber.ring``): each must stay importable from there. A class
exported by a public module must carry a public ``__module__`` from which it can be
imported again: its repr and its pickles (classes pickle by reference) name that module,
never a private one.
"""

from __future__ import annotations

import importlib
import inspect
import pickle

import pytest

PUBLIC = {
    "fiber": (
        "Array AuthenticationError Barrier BoundedSemaphore BrokenBarrierError BufferTooShort "
        "Condition Config Event FiberContext FiberError JoinableQueue Lock Manager Pipe Pool "
        "Process ProcessError Queue RLock RawArray RawValue RemoteError Semaphore SimpleQueue "
        "TimeoutError Value active_children allow_connection_pickling cpu_count current_process "
        "errors futures freeze_support get_all_start_methods get_config get_context get_logger "
        "get_start_method init log_to_stderr managers meta parent_process reducer set_executable "
        "set_forkserver_preload set_start_method"
    ),
    "fiber.backends": (
        "Backend JobHandle JobInfo JobSpec JobState JobStatus JobWatcher Resources get_backend "
        "known_backends register_backend"
    ),
    "fiber.backends.docker": (
        "DockerBackend exit_status parse_mounts own_container_id LABEL_PROGRAM LABEL_JOB "
        "LABEL_NAME"
    ),
    "fiber.backends.kubernetes": (
        "KubernetesBackend pod_manifest pod_status parse_claims LABEL_PROGRAM LABEL_JOB"
    ),
    "fiber.backends.local": "LocalBackend",
    "fiber.backends.slurm": (
        "SlurmBackend parse_squeue parse_raw_exit parse_exit_pair parse_sacct status_of "
        "controller_address OWN_JOB_ENV PROGRAM_ENV"
    ),
    "fiber.cli": "main",
    "fiber.config": "Config get_config init override CONFIG_FILE",
    "fiber.connection": "Pipe Connection wait BufferTooShort",
    "fiber.context": "FiberContext get_context DefaultContext",
    "fiber.errors": (
        "FiberError ConfigError BackendError UnknownBackendError SubmitError TransportError "
        "AuthenticationError ProcessError ProcessStateError ResourceLimitError TimeoutError "
        "RemoteError RemoteTraceback WorkerLostError BrokenPoolError PoolTerminatedError"
    ),
    "fiber.futures": "Executor ProcessPoolExecutor",
    "fiber.managers": (
        "BaseManager SyncManager AsyncManager BaseProxy AsyncProxy AutoProxy AsyncAutoProxy "
        "MakeProxyType Namespace Token CallHandle DictProxy ListProxy ValueProxy ArrayProxy "
        "NamespaceProxy IteratorProxy AcquirerProxy ConditionProxy EventProxy BarrierProxy "
        "QueueProxy PoolProxy AsyncResultProxy DirectProxy BaseListProxy"
    ),
    "fiber.meta": "meta resources_of Resources",
    "fiber.pool": "Pool AsyncResult ApplyResult MapResult IMapIterator IMapUnorderedIterator",
    "fiber.process": (
        "Process current_process parent_process active_children start_all terminate_all"
    ),
    "fiber.queues": "Queue SimpleQueue JoinableQueue",
    "fiber.ring": "Ring RingError RingMember current_member",
    "fiber.experimental": "Ring RingNode",
    "fiber.sharedctypes": (
        "Value Array RawValue RawArray SharedValue SharedArray SharedStructure Synchronized "
        "SynchronizedArray SynchronizedString SynchronizedStructure"
    ),
    "fiber.synchronize": (
        "Lock RLock Semaphore BoundedSemaphore Condition Event Barrier BrokenBarrierError"
    ),
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_is_importable_from_its_module(module):
    mod = importlib.import_module(module)
    missing = [n for n in PUBLIC[module].split() if not hasattr(mod, n)]
    assert not missing, f"{module} no longer provides {missing}"
    assert set(PUBLIC[module].split()) <= set(mod.__all__)


def _exported_classes():
    for module in sorted(PUBLIC):
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            # an alias (managers.Token is Spec) pickles under its class's own name
            if (inspect.isclass(obj) and obj.__module__.split(".")[0] == "fiber"
                    and obj.__name__ == name):
                yield module, name, obj


@pytest.mark.parametrize("module, name, cls", list(_exported_classes()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_exported_classes_carry_a_public_module(module, name, cls):
    home = cls.__module__
    assert not any(part.startswith("_") for part in home.split(".")), (
        f"{module}.{name} says it lives in the private module {home}")
    assert getattr(importlib.import_module(home), cls.__qualname__) is cls
    assert pickle.loads(pickle.dumps(cls)) is cls


@pytest.mark.parametrize("path, expected", [
    ("fiber.pool.Pool", "fiber.pool"),
    ("fiber.pool.AsyncResult", "fiber.pool"),
    ("fiber.process.Process", "fiber.process"),
    ("fiber.connection.Connection", "fiber.connection"),
    ("fiber.queues.Queue", "fiber.queues"),
    ("fiber.synchronize.Condition", "fiber.synchronize"),
    ("fiber.managers.SyncManager", "fiber.managers"),
    ("fiber.managers.DictProxy", "fiber.managers"),
    ("fiber.backends.JobSpec", "fiber.backends"),
    ("fiber.backends.local.LocalBackend", "fiber.backends.local"),
    ("fiber.backends.slurm.SlurmBackend", "fiber.backends.slurm"),
    ("fiber.backends.docker.DockerBackend", "fiber.backends.docker"),
    ("fiber.backends.kubernetes.KubernetesBackend", "fiber.backends.kubernetes"),
])
def test_the_classes_of_the_standard_paths_name_them(path, expected):
    module, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(module), name).__module__ == expected


def test_a_process_prints_and_pickles_under_its_public_name():
    import fiber

    p = fiber.Process(target=print)
    assert repr(p).startswith("<Process name=")
    assert b"fiber.process" in pickle.dumps(type(p)) and b"_process" not in pickle.dumps(type(p))
