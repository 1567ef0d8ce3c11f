"""One Optuna study searched by a pool's six workers on three hosts, through a journal a
fiber manager holds (fiber.optuna.ManagerJournal): every trial lands in the one study,
from workers of several hosts; a worker killed mid-trial costs the study that trial
(left RUNNING, as Optuna leaves any dead process's) and its search runs again."""

import os
import signal
import tempfile

import _common
import optuna
from optuna.storages import JournalStorage
from optuna.trial import TrialState

import fiber
from fiber.optuna import ManagerJournal

SEARCHES, TRIALS = 6, 10
KILLED_AT = 4  # the search marked dies in its fifth trial, the first time


def objective(trial, marker, done):
    trial.set_user_attr("ip", _common.my_ip())
    x = trial.suggest_float("x", -10, 10)
    if marker and done[0] == KILLED_AT and not os.path.exists(marker):
        open(marker, "w").close()  # once: the worker dies in the middle of this trial
        os.kill(os.getpid(), signal.SIGKILL)
    done[0] += 1
    return (x - 2) ** 2


def search(journal, marker):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="s", storage=JournalStorage(journal))
    done = [0]  # this search's trials completed
    study.optimize(lambda trial: objective(trial, marker, done), n_trials=TRIALS)
    return fiber.current_process().name


def main():
    hosts = _common.setup()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    marker = os.path.join(tempfile.mkdtemp(), "killed-once")
    with fiber.Manager() as manager, fiber.Pool(SEARCHES) as pool:
        journal = ManagerJournal(manager.list())
        study = optuna.create_study(study_name="s", storage=JournalStorage(journal))
        names = pool.starmap(search, [(journal, marker if i == 0 else "")
                                      for i in range(SEARCHES)], chunksize=1)
        trials = study.get_trials(deepcopy=False)
        manager_ip = manager._process._job.handle.host  # noqa: SLF001 - where it ran
        _common.result(
            host_ips=[ip for _, ip in hosts.hosts],
            trial_ips=sorted({t.user_attrs["ip"] for t in trials}),
            names=sorted(set(names)),
            complete=sum(t.state == TrialState.COMPLETE for t in trials),
            running=sum(t.state == TrialState.RUNNING for t in trials),
            numbers_ok=sorted(t.number for t in trials) == list(range(len(trials))),
            best=study.best_value,
            killed=os.path.exists(marker),
            manager_host=manager_ip)


if __name__ == "__main__":
    main()
