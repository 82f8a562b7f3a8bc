"""A study's storage, lock and folder, and the trials' owners (tuner processes): dead owners' trials queued again."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from typing import Optional

from cleanrl_utils.validation import fail, first_sentence


def storage_url(storage: Optional[str], study_dir: str) -> str:
    """The storage's URL: None or "" for SQLite in the study folder, "journal" for a journal file there."""
    if storage in (None, ""):
        return f"sqlite:///{os.path.abspath(os.path.join(study_dir, 'study.db'))}"
    if storage == "journal":
        return "journal:///" + os.path.abspath(os.path.join(study_dir, "journal.log")).lstrip("/")
    return storage


def open_storage(url: str):
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    try:
        if url.startswith("journal:"):
            path = url[len("journal:") :]
            path = "/" + path.lstrip("/") if path.startswith("///") else path
            return optuna.storages.JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
        return optuna.storages.RDBStorage(url)
    except Exception as exc:
        fail(f"cannot open the storage {url} ({first_sentence(exc)})")


@contextlib.contextmanager
def study_lock(study_dir: str):
    """The study folder's lock file, held by one tuner process at a time (several may share the study)."""
    from optuna.storages.journal import JournalFileOpenLock

    lock = JournalFileOpenLock(os.path.join(study_dir, "study"))
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def check_writable(folder: str) -> None:
    """The study folder takes new files, else one line (a read-only copy of a study)."""
    try:
        fd, path = tempfile.mkstemp(dir=folder, prefix=".writable_")
        os.close(fd)
        os.unlink(path)
    except OSError as exc:
        fail(
            f"cannot write in the study folder {folder!r} ({exc.strerror}): the tuner keeps the study's lock, "
            "storage and runs there; make it writable, or copy it and pass the copy's folder as --studies-dir"
        )


def owner_id() -> str:
    """This tuner process: host, pid and start time (pids are reused)."""
    import psutil

    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time():.2f}"


def pid_alive(owner: str) -> bool:
    """Whether the tuner process `owner` (of `owner_id`, on this host) still runs."""
    import psutil

    _, pid, started = (owner.split(":") + ["", ""])[:3]
    if not pid.isdigit():
        return True
    try:
        return f"{psutil.Process(int(pid)).create_time():.2f}" == started or not started
    except psutil.NoSuchProcess:
        return False


def had_runs(trial) -> bool:
    """Whether the trial had made its runs (its command is recorded first; a study of fixed flags has no params)."""
    return bool(trial.params) or "command" in trial.user_attrs


def requeue_orphans(study) -> None:
    """Under the study's lock: dead tuners' trials on this host marked interrupted; each interrupted trial queued
    again once, on its run folders (`run_key`)."""
    import optuna

    TrialState, host = optuna.trial.TrialState, socket.gethostname()
    for t in study.get_trials(deepcopy=False):
        owner = t.user_attrs.get("owner", "")
        # no owner: a tuner stopped between taking the trial and naming itself (both happen under the lock)
        if t.state == TrialState.RUNNING and (not owner or owner.split(":")[0] == host and not pid_alive(owner)):
            if had_runs(t):  # (a trial stopped before its params has nothing to resume)
                optuna.trial.Trial(study, t._trial_id).set_user_attr("interrupted", True)
            study.tell(t.number, state=TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    successors = {t.user_attrs.get("resumes") for t in trials}
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get("interrupted") and t.number not in successors:
            study.enqueue_trial(
                t.params,
                user_attrs={
                    "run_key": t.user_attrs.get("run_key", f"trial{t.number:04d}"),
                    "resumes": t.number,
                    "earlier_wall_time_s": t.user_attrs.get("wall_time_s", 0.0),
                },
            )
