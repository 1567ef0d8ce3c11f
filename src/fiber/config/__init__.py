"""fiber's one configuration object, resolved once.

Precedence, highest first:

    fiber.init(key=value)  >  FIBER_KEY environment variables  >  .fiberconfig  >  defaults

How each source is read and checked: the API reference's page of this module."""

from __future__ import annotations

import configparser
import contextlib
import dataclasses
import os
import sys
import types
import typing
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from .._process_state import here
from ..errors import ConfigError
from . import _backend_keys, _registry, _values
from . import _compat as compat

__all__ = ["Config", "get_config", "init", "override", "reset", "load", "get_dict",
           "get_object", "from_dict", "settings", "CONFIG_FILE"]

_S = TypeVar("_S")

CONFIG_FILE = ".fiberconfig"
_ENV_PREFIX = "FIBER_"
_SECTIONS = ("fiber", "default")  # default: the original fiber's section
LOG_LEVELS = _values.LOG_LEVELS


@dataclasses.dataclass(frozen=True)
class Config:
    """The resolved configuration. Every field can be set by each source above."""

    #: Backend that runs jobs: ``local``, ``slurm``, ``sge`` (Grid Engine), ``ssh``,
    #: ``docker``, ``kubernetes``, or a third-party backend registered under the
    #: ``fiber.backends`` entry-point group.
    backend: str = "local"
    #: Address this process's listening sockets bind to (an IPv4 or IPv6 address, or a
    #: host name; not an interface's name); empty means "the address the backend says
    #: peers can reach". Not inherited: a child listens on the local address on the route
    #: to its parent, which is on its own host.
    listen_host: str = ""
    #: Verbose logging of fiber's machinery to stderr (never of secrets): the same as
    #: ``log_level=debug``.
    debug: bool = False
    #: Least severe of fiber's log messages shown: ``debug``, ``info``, ``warning``,
    #: ``error`` or ``critical`` (also the original fiber's numbers, ``10`` for debug).
    log_level: str = "warning"
    #: Where fiber's log messages go: empty for stderr, ``stdout``, or a file path, to
    #: which every process appends ``.<its name>`` (``fiber.log.MainProcess``,
    #: ``fiber.log.PoolWorker-3``): one file a process, opened when a job starts and when
    #: the main process starts fiber's machinery (its first ``Pool()``, ``Queue()`` or
    #: ``start()``), its directory made if missing. A path whose folder cannot be made or
    #: written raises ``ConfigError`` when the config is read: at ``fiber.init``, or
    #: (``FIBER_LOG_FILE``, ``.fiberconfig``) at the program's first use of fiber; a file
    #: that cannot be opened, at that first ``Pool()``; never in a job.
    log_file: str = ""
    #: What fiber's jobs write to stdout and stderr appears on the master's stdout and
    #: stderr as it is written, each line prefixed with the job's name and host (every
    #: backend; the job's own log keeps it all too). False: it goes to the job's log
    #: only (on ``local``: the master's terminal, unprefixed, as a subprocess's would).
    forward_output: bool = True
    #: Forwarded lines start with ``(PoolWorker-3@host) ``; False: they come as written.
    output_prefix: bool = True
    #: TCP port on which the main process listens for its jobs; 0: a free port. For a
    #: firewall that opens one port (jobs' own children still take free ports).
    listen_port: int = 0
    #: ``HOST:PORT`` where the main process serves its web dashboard and Prometheus
    #: ``/metrics`` (port 0: a free one; a token guards both); empty: none. See
    #: `fiber.dashboard`; ``fiber dashboard`` attaches one to a running program instead.
    dashboard: str = ""
    #: Python interpreter jobs run; empty means the interpreter running this program.
    python: str = ""
    #: Container image for container backends; empty means the master's own image.
    image: str = ""
    #: CPUs of a job whose target has no ``@fiber.meta(cpu=...)``.
    cpu_per_job: float = 1.0
    #: Memory (MB) of a job whose target has no ``@fiber.meta(memory=...)``; 0: no limit
    #: asked for.
    memory_per_job_mb: int = 0
    #: GPUs of a job whose target has no ``@fiber.meta(gpu=...)``.
    gpu_per_job: int = 0
    #: Seconds between liveness probes of a connection (TCP keepalive).
    heartbeat_interval: float = 1.0
    #: Seconds a peer's host may stay silent (unreachable, or losing every packet) before
    #: the peer counts as lost. A peer that ends is known at once (its end closes the
    #: connection); this grace is for links that drop packets for a while and heal. A
    #: new connection and its handshake may take as long (10 s at least).
    heartbeat_timeout: float = 30.0
    #: Seconds a submitted job may take to connect back before it counts as failed.
    startup_timeout: float = 600.0
    #: Whether connections between hosts are encrypted and authenticated with TLS 1.3
    #: (each end proves, by a certificate, that it is a process of this program):
    #: ``auto`` (connections between hosts), ``off`` (the network is trusted) or ``on``
    #: (every TCP connection, loopback too). See "Private links across hosts (TLS)".
    tls: str = "auto"
    #: A site's own certificate authority (a PEM file), with ``tls_cert_file`` and
    #: ``tls_key_file``: all three or none. Every job reads the same paths (the
    #: cluster's shared filesystem): no key travels in a job's environment. Unset: the
    #: program makes a throwaway authority (valid 30 days) and hands it to its jobs in
    #: their environment, as it hands them the program's secret.
    tls_ca_file: str = ""
    #: The PEM certificate (chain) every process of the program shows, signed by
    #: ``tls_ca_file``'s authority.
    tls_cert_file: str = ""
    #: The PEM private key of ``tls_cert_file`` (unencrypted, readable by the user alone).
    tls_key_file: str = ""
    #: Processes in a Pool created with ``processes=None``; 0 means ``cpu_count()``.
    pool_processes: int = 0
    #: Workers a pool puts in one cluster job (``Pool(workers_per_job=...)``): the job
    #: asks for their CPUs, memory and GPUs together and forks them, so that a pool of
    #: thousands of workers is hundreds of cluster jobs; a worker that dies in it is
    #: replaced in it, in milliseconds. 1: a job a worker. 0: the pool chooses: a job a
    #: worker below 64 workers, on local, netns and docker, where the node size is
    #: unknown, and for workers that ask for memory or GPUs; else as many as fit the
    #: smallest node by CPUs (at most 64).
    pool_workers_per_job: int = 0
    #: Modules a job of several pool workers imports before it forks them, so that they
    #: share them (see ``pool_workers_per_job``): comma-separated names, ``auto`` (the
    #: third-party packages the master has imported from site-packages when the pool
    #: starts, e.g. numpy, torch, gymnasium) or empty (only what the pool's function
    #: and initializer need). A module that cannot be imported in the job is skipped.
    pool_preload: str = "auto"
    #: Times a pool task that killed its worker is tried again before it fails (and, in a
    #: ``Pool(error_handling=True)``, a task that raised).
    pool_max_task_retries: int = 3
    #: A task a pool worker holds is late once the task that worker runs has run this
    #: many times its function's measured task time (and at least 1 s): while another
    #: worker idles with nothing queued, a copy of it runs there, and the first result
    #: is kept (the task runs twice; its result arrives once). 0: never copied.
    pool_late_factor: float = 4.0
    #: Tasks a pool worker holds beyond the one it runs (prefetch credit), for tasks
    #: known to be quick (under 20 ms); slower ones, or not yet measured, are not held
    #: (but by a worker on a slow link: enough to cover its round trip, see the pool page).
    pool_prefetch: int = 2
    #: Items a Queue's consumer in another process holds ahead when items are queued
    #: behind the one it got (lent: still in the queue, counted by ``qsize``, given back
    #: when another consumer waits or this one ends), so that a consumer across a slow
    #: link is not paced by one round trip per ``get``. 0: one item per ``get``, and
    #: every consumer's items in queue order.
    queue_prefetch: int = 16
    #: Seconds after which a pool worker is renewed on purpose (a replacement started,
    #: then the worker retired: no task is lost or run twice), workers spread so that they
    #: do not all go at once; 0: never. A backend's known time limit (Slurm's
    #: ``slurm_time_limit``) renews workers before it in any case.
    pool_worker_lifetime: float = 0.0
    #: Seconds before a worker's known end (its job's time limit) that its replacement is
    #: started (at most a third of the limit), so the pool keeps its width.
    pool_renew_margin: float = 60.0
    #: Microseconds a thread waiting for a message (a pool result or task, a pipe's or
    #: queue's next item, a lock) polls for it before it sleeps, while this host has a
    #: CPU to spare: a quick reply is then read without the wake-up of a sleeping
    #: thread. A pool's master polls longer while quick tasks run (see "Pool scheduling"
    #: in the guide's architecture page). 0: never poll.
    spin_us: int = 200
    #: Each backend's own settings, ``{backend: {key: value}}``, for the keys set (see
    #: `settings`): ``fiber.init(slurm_partition="gpu")``, ``FIBER_SLURM_PARTITION``
    #: or a ``[fiber.slurm]`` section of ``.fiberconfig``. A backend declares its keys
    #: (``Backend.settings``); the core names none.
    backends: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: The original fiber's ``Config(conf_file=path)``: the config that file (instead of
    #: ``.fiberconfig``) and the environment give, what `init` set left out (not a field).
    conf_file: dataclasses.InitVar[Optional[str]] = None

    def __post_init__(self, conf_file: Optional[str]) -> None:
        """``Config(conf_file=path)`` takes its values from that file and the environment
        (``path`` alone: other arguments with it would be overwritten, so they are
        refused).

        Raises:
            TypeError: ``conf_file`` is given with other arguments.
            ConfigError: the file has an unknown key or a wrong value.
        """
        if conf_file is None:
            return
        defaults = Config()
        given = [f.name for f in dataclasses.fields(self)
                 if getattr(self, f.name) != getattr(defaults, f.name)]
        if given:
            raise TypeError(f"Config(conf_file=...) takes no other argument, got {given}")
        loaded = resolve({}, config_file=conf_file)
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, getattr(loaded, f.name))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """A config of ``values`` over the defaults (the original fiber's; see the
        module's `from_dict`)."""
        return from_dict(values)

    def __getattr__(self, name: str) -> Any:
        """A backend's setting by its full key (``cfg.slurm_partition``), as before
        backends declared their own (their code reads `settings`), or a key of the
        original fiber read as ``fiber.config.<key>`` is (``cfg.mem_per_job``)."""
        found = None if name.startswith("_") else _backend_keys.split(name)
        if found is None:
            try:  # a key of the original fiber (its Config's attributes)
                return compat.read_old(name, lambda key: getattr(self, key))
            except KeyError:
                pass
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        backend, key, cls = found
        return getattr(settings(cls, backend, self), key)


_FIELDS: Dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Config)
                                              if f.name != "backends"}


def field_types(cls: type) -> Dict[str, Any]:
    """The types of ``cls``'s fields, evaluated. Not ``typing.get_type_hints(cls)``: on
    Python 3.9 it refuses the ``InitVar`` annotation of ``conf_file`` (an argument, not
    a field), and importing fiber failed there."""
    fields = {f.name for f in dataclasses.fields(cls)}
    shim = type("_Fields", (), {"__module__": cls.__module__, "__annotations__": {
        name: hint for name, hint in cls.__annotations__.items() if name in fields}})
    return typing.get_type_hints(shim, vars(sys.modules[cls.__module__]))


_TYPES: Dict[str, Any] = field_types(Config)


def _key_type(key: str, where: str = "") -> Any:
    """The type of key ``key``, the core's or a backend's (see ._backend_keys), set in
    ``where``.

    Raises:
        ConfigError: no such key: the message names the closest one and the valid ones.
    """
    if key in _FIELDS:
        return _TYPES[key]
    try:
        return _backend_keys.field_type(key, where)[2]
    except LookupError:
        pass
    raise ConfigError(key, "unknown key" + compat.suggestion(
        key, [*_FIELDS, *_backend_keys.backend_keys()]), valid=list(_FIELDS), where=where)


def _value(key: str, raw: Any, where: str) -> Any:
    """``raw``, the value of key ``key`` that ``where`` gives (``FIBER_DEBUG``, a file's
    path, ``fiber.init``), converted and checked.

    Raises:
        ConfigError: the key is unknown, or the value is not of its type or range.
    """
    return _values.checked(key, _values.converted(key, _key_type(key, where), raw, where), where)


def _from_file(path: str) -> Dict[str, str]:
    """The settings of config file ``path`` ({} if there is none).

    Raises:
        ConfigError: the file cannot be read, is not text, or is not a config file.
    """
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"is not a text file (byte {e.start}: {e.reason}); a "
                          "fiber config file is an INI file of key = value lines") from None
    except OSError as e:
        raise ConfigError(path, f"cannot be read: {e.strerror or e}") from None
    if "\0" in text:
        raise ConfigError(path, "is not a text file (it holds NUL bytes); a fiber config "
                          "file is an INI file of key = value lines")
    if not text.lstrip().startswith("["):
        text = "[fiber]\n" + text
    parser = configparser.ConfigParser(interpolation=None, default_section="\0none")
    # keys in any case (Log_Level), as the original's configparser read them
    parser.optionxform = str.lower  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text, source=path)
    except configparser.Error as e:
        raise ConfigError(path, f"cannot parse: {e}") from None
    backends = {s: s[len("fiber."):] for s in parser.sections() if s.startswith("fiber.")}
    unknown_sections = [s for s in parser.sections() if s not in _SECTIONS and s not in backends]
    if unknown_sections:
        raise ConfigError(path, f"unknown section(s) {unknown_sections}; use [fiber], or "
                          "[fiber.<backend>] for a backend's own keys")
    out: Dict[str, str] = {}
    for section in reversed(_SECTIONS):  # [fiber] wins over the original's [default]
        if parser.has_section(section):
            out.update(parser[section])
    for section, given in backends.items():  # [fiber.slurm] partition: slurm_partition
        backend = _registry.canonical(given)
        if backend is None:
            raise ConfigError(path, f"section [{section}]: no backend named {given!r}"
                              + compat.suggestion(given.lower(), _registry.known()))
        prefix = _registry.key_prefix(backend)
        out.update({prefix + key: value for key, value in parser[section].items()})
    return out


def _is_key(key: str) -> bool:
    try:
        _key_type(key)
    except ConfigError:
        return False
    return True


def _from_env(environ: Mapping[str, str]) -> Dict[str, str]:
    out = {}
    legacy = (*compat.RENAMED, *compat.NO_EFFECT)
    ours = [n for n in environ if n.startswith(_ENV_PREFIX) and n not in compat.NOT_SETTINGS]
    others = _backend_keys.variables(ours)
    for name in ours:
        key = name[len(_ENV_PREFIX):].lower()
        if name not in others and (key in _FIELDS or key in legacy or _is_key(key)):
            out[key] = environ[name]
    if not compat.in_a_job(environ):  # the program warns; its jobs inherit the variables
        keys = [*_FIELDS, *out]
        for name, hint in sorted(compat.unknown_variables(environ, keys, others).items()):
            compat.warn_once(f"env:{name}", f"{name} is not a fiber setting{hint}; it has "
                             "no effect", UserWarning)
    return out


def _translated(source: Mapping[str, Any], where: str) -> Dict[str, Tuple[Any, str]]:
    """``source`` with the original fiber's keys read as ours, each value with the key it
    was set under (``default_backend`` for ``backend``); a new key set in the same source
    wins over its old name."""
    out: Dict[str, Tuple[Any, str]] = {}
    for key, value in source.items():
        pair = compat.translate(key, value, where)
        if pair is not None and not (pair[0] != key and pair[0] in source):
            out[pair[0]] = (pair[1], key)
    return out


def _built(values: Mapping[str, Any], origins: Mapping[str, str],
           base: Optional[Config] = None) -> Config:
    """A Config of converted ``values`` (full keys, set where ``origins`` says), over
    ``base`` (or the defaults).

    Raises:
        ConfigError: a backend refuses one of its values.
    """
    core = {k: v for k, v in values.items() if k in _FIELDS}
    backends = {name: dict(given) for name, given in (base.backends if base else {}).items()}
    for key, value in values.items():
        if key not in _FIELDS:
            name, sub, _ = _backend_keys.field_type(key)
            backends.setdefault(name, {})[sub] = value
    backends = _backend_keys.checked(backends, origins)
    if base is None:
        return Config(**core, backends=backends)
    return dataclasses.replace(base, **core, backends=backends)


def resolve(
    explicit: Mapping[str, Any],
    environ: Optional[Mapping[str, str]] = None,
    config_file: Optional[str] = None,
) -> Config:
    """Build a Config from the four sources; pure apart from reading the file."""
    values: Dict[str, Any] = {}
    path = config_file if config_file is not None else CONFIG_FILE
    sources = (
        (_translated(_from_file(path), path), lambda key: path),
        (_translated(_from_env(os.environ if environ is None else environ), "environment"),
         lambda key: _ENV_PREFIX + key.upper()),
        (_translated(explicit, "fiber.init"), lambda key: "fiber.init"),
    )
    origins: Dict[str, str] = {}
    for source, where in sources:
        for key, (raw, given_as) in source.items():
            origins[key] = where(given_as)
            values[key] = _value(key, raw, origins[key])
    if "log_file" in values:
        _values.check_log_file(values["log_file"], origins["log_file"])
    cfg = _built(values, origins)
    _values.check_tls_files(_tls_files(cfg), origins)
    return cfg


def _tls_files(cfg: Config) -> Dict[str, str]:
    return {key: getattr(cfg, key) for key in _values.TLS_FILES}


def settings(cls: Type[_S], backend: str, cfg: Optional[Config] = None) -> _S:
    """Backend ``backend``'s settings (its dataclass ``cls``) in ``cfg`` or the config in
    force: the keys set, and ``cls``'s defaults for the others."""
    return cls(**(cfg or get_config()).backends.get(backend, {}))


def to_env(cfg: Config, machine_keys: Sequence[str] = ("listen_host",)) -> Dict[str, str]:
    """``FIBER_*`` variables that make a new process resolve ``cfg``'s non-default values
    (``fiber run`` hands the config to the main program this way). ``machine_keys`` name
    this machine, not the job's (``listen_host``; a backend's keys marked ``machine``, a
    kubeconfig's path): they are set empty, so that a job that inherits this environment
    too (``sbatch``) does not take them."""
    out = {}

    def put(key: str, value: Any, default: Any, machine: bool) -> None:
        if machine:
            out[_ENV_PREFIX + key.upper()] = ""
        elif value != default:
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            out[_ENV_PREFIX + key.upper()] = text

    for key, field in _FIELDS.items():
        put(key, getattr(cfg, key), field.default, key in machine_keys)
    for name, given in cfg.backends.items():
        machine = _backend_keys.machine_keys(name)
        for sub, value in given.items():
            put(_registry.key_prefix(name) + sub, value, None, sub in machine)
    return out


def get_config() -> Config:
    """The config in force in this process, resolved on first use."""
    cfg = here.api.config_resolved
    if cfg is None:
        api = here.api
        with api.config_lock:
            if api.config_resolved is None:
                api.config_resolved = resolve(api.config_explicit)
            cfg = api.config_resolved
    return cfg


def init(**kwargs: Any) -> Config:
    """Set configuration from code (highest precedence) and return the result.

    Raises:
        ConfigError: a key is unknown or a value has the wrong type, or ``backend``
            names no backend.
    """
    kwargs = {key: value for key, (value, _) in _translated(kwargs, "fiber.init").items()}
    # None, as the original fiber's defaults were (init(backend=None)): the key's value
    # from the environment, .fiberconfig or the default again
    unset = [key for key, value in kwargs.items() if value is None]
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    api = here.api
    with api.config_lock:
        for key in unset:
            _key_type(key)  # an unknown key is an error, None or not
        for key, value in kwargs.items():
            _value(key, value, "fiber.init")
        merged = {**{k: v for k, v in api.config_explicit.items() if k not in unset},
                  **kwargs}
        cfg = resolve(merged)
        api.config_explicit.clear()
        api.config_explicit.update(merged)
        api.config_resolved = cfg
        return cfg


def reset() -> Config:
    """Forget what `init` set and resolve the config again from the environment
    and ``.fiberconfig`` (the original fiber's ``fiber.reset()``)."""
    api = here.api
    with api.config_lock:
        api.config_explicit.clear()
        api.config_resolved = cfg = resolve({})
        return cfg


def load(conf_file: str) -> Config:
    """The config that ``conf_file`` (instead of ``.fiberconfig``), the environment and
    `init` give, without making it the one in force (the original fiber's
    ``Config(conf_file=...)``; pass its values to `init` to use it).

    Raises:
        ConfigError: the file or a setting is wrong.
    """
    return resolve(here.api.config_explicit, config_file=conf_file)


def get_object() -> Config:
    """The config in force (the original fiber's ``fiber.config.get_object()``; a
    `Config` is immutable here: `init` or `override` change what is in force)."""
    return get_config()


def from_dict(values: Mapping[str, Any]) -> Config:
    """A config of ``values`` over the defaults, the environment and ``.fiberconfig``
    left out (the original fiber's ``Config.from_dict``; its keys are read as
    everywhere), without making it the one in force.

    Raises:
        ConfigError: a key is unknown or a value is wrong.
    """
    return resolve(values, environ={}, config_file=os.devnull)


def get_dict() -> Dict[str, Any]:
    """The config in force as a dict of full keys, every backend's too (the original
    fiber's ``fiber.config.get_dict()``)."""
    cfg = get_config()
    out = {key: getattr(cfg, key) for key in _FIELDS}
    for name in _registry.known():
        cls = _registry.settings_class(name)
        if cls is not None:
            prefix = _registry.key_prefix(name)
            out.update({prefix + k: v for k, v in
                        dataclasses.asdict(settings(cls, name, cfg)).items()})
    return out


@contextlib.contextmanager
def override(**kwargs: Any) -> Iterator[Config]:
    """Temporarily replace config values (for tests); restores the previous config."""
    base = get_config()
    converted = {}
    for key, value in kwargs.items():
        converted[key] = _value(key, value, "config.override")
    if "log_file" in converted:
        _values.check_log_file(converted["log_file"], "config.override")
    new = _built(converted, {key: "config.override" for key in converted}, base)
    _values.check_tls_files(_tls_files(new), {key: "config.override" for key in converted})
    api = here.api
    with api.config_lock:
        api.config_resolved = new
    try:
        yield new
    finally:
        with api.config_lock:
            api.config_resolved = base


def install(cfg: Config) -> None:
    """Make ``cfg`` this process's config (a job receiving its parent's, at its start)."""
    with here.api.config_lock:
        here.api.config_resolved = cfg


class _ConfigModule(types.ModuleType):
    """``fiber.config`` itself: ``fiber.config.<key>`` reads the value in force, and
    assigning to it sets it as `init` does (the original fiber's documented way),
    instead of making a module global nothing reads."""

    def __getattr__(self, name: str) -> Any:
        if name in _FIELDS or (not name.startswith("_") and _is_key(name)):
            return getattr(get_config(), name)
        try:  # a key of the original fiber (its tests read default_backend)
            return compat.read_old(name, lambda key: getattr(get_config(), key))
        except KeyError:
            pass
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in _FIELDS or name in compat.RENAMED or name in compat.NO_EFFECT
                or (not name.startswith("_") and _is_key(name))):
            init(**{name: value})
        else:
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ConfigModule
