"""The tuner (cleanrl_utils/tuner.py) on the real ppo.py: a study with parallel trials that survives a SIGTERM, a
pruned trial, a crashed trial, two tuner processes on one journal study, a Slurm array, CleanRL's own example, and
bad input. Runs are tiny CartPole runs with one thread each (the tuner sets OMP_NUM_THREADS per run)."""

from __future__ import annotations

import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO_ROOT, extract_commands, processes_working_in

optuna = pytest.importorskip("optuna")

from cleanrl_utils.run_events import EventFollower  # noqa: E402
from cleanrl_utils.tuner import Tuner  # noqa: E402

PPO = str(REPO_ROOT / "cleanrl" / "ppo.py")
TINY = {"total-timesteps": 512, "num-envs": 2, "num-steps": 32}


def tuner_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}


def scratch(tmp_path: Path) -> Path:
    """A folder that stands for the repository's root (the docs' commands name cleanrl/ppo.py)."""
    (tmp_path / "cleanrl").symlink_to(REPO_ROOT / "cleanrl")
    return tmp_path


def load(storage_url: str, name: str):
    if storage_url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        storage = optuna.storages.JournalStorage(JournalFileBackend(storage_url[len("journal:") :]))
        return optuna.load_study(study_name=name, storage=storage)
    return optuna.load_study(study_name=name, storage=storage_url)


def counted(study) -> list:
    return [t for t in study.get_trials() if t.state.name in ("COMPLETE", "PRUNED")]


def run_starts(run_dir: Path) -> list[str]:
    """What each attempt of a run printed first about its checkpoint (one entry per `$ command` line)."""
    text = (run_dir / "tuner.log").read_text()
    return [part for part in text.split("\n$ ")[0:] if part.strip()]


# ---------------------------------------------------------------------------------------------- bad input


def bad(**changes):
    args = dict(
        script=PPO,
        metric="charts/episodic_return",
        target_scores={"CartPole-v1": [0, 500]},
        params_fn=lambda trial: dict(TINY),
    )
    args.update(changes)
    return Tuner(**args)


BAD_INPUTS = {
    "unknown flag": (bad(params_fn=lambda t: {"learning-rat": 0.1}), "the flags of params_fn do not parse"),
    "value refused": (bad(params_fn=lambda t: {"learning-rate": -1.0}), "--learning-rate must be positive"),
    "flag the tuner sets": (bad(params_fn=lambda t: {"seed": 3}), "params_fn must not set 'seed'"),
    "env without target": (
        bad(target_scores={"CartPole-v1": [0, 500], "Acrobot-v1": None}),
        "Acrobot-v1 has no target scores",
    ),
    "unknown env": (bad(target_scores={"CartPol-v1": [0, 500]}), "unknown environment id 'CartPol-v1'"),
    "aggregation": (bad(aggregation_type="mean"), "unknown aggregation_type 'mean'"),
    "direction": (bad(direction="up"), "unknown direction 'up'"),
    "storage": (bad(storage="sqlite:////nonexistent-folder/x/study.db"), "cannot open the storage"),
    "storage scheme": (bad(storage="nosuchdb://host/x"), "cannot open the storage"),
    "study name": (bad(study_name="a/b"), "is not a folder name"),
    "objective": (bad(objective="score_in_time"), "needs a positive time budget"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_writes_nothing(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tuner, said = BAD_INPUTS[case]
    with pytest.raises(SystemExit) as exc:
        tuner.tune(num_trials=2, num_seeds=1)
    message = str(exc.value.code)
    assert message.startswith("error: ") and "\n" not in message and said in message, message
    assert os.listdir(tmp_path) == []


def test_bad_input_on_the_command_line_is_one_line(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.tuner",
            "--script",
            PPO,
            "--study-name",
            "..",
            "--params",
            "total-timesteps=2048",
        ],
        cwd=tmp_path,
        env=tuner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1 and res.stderr.strip().count("\n") == 0, res.stderr
    assert res.stderr.startswith("error: the study name '..' is not a folder name"), res.stderr
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------- a study, stopped


def readme_command() -> list[str]:
    """The tuning command of README.md, as written."""
    found = [
        c.tokens
        for c in extract_commands(REPO_ROOT / "README.md")
        if c.tokens[:3] == ["python", "-m", "cleanrl_utils.tuner"]
    ]
    assert len(found) == 1, found
    return found[0]


def follow(run_dir: Path) -> EventFollower:
    follower = EventFollower(str(run_dir), "charts/episodic_return")
    follower.poll()
    return follower


@pytest.mark.slow
def test_readme_study_stops_on_sigterm_and_the_same_command_finishes_it(tmp_path):
    """The README's command (6 trials x 2 seeds, 2 at a time) gets a SIGTERM while trials run; the same command
    again ends the study with exactly 6 counted trials, the cut runs continued from their checkpoints, no run folder
    left over, no run process left; the table and the best trial's command print, and the best trial's score is its
    runs' normalised score, read back from their events."""
    root = scratch(tmp_path)
    tokens = readme_command()
    command = [sys.executable, *tokens[1:]]
    num_trials = int(tokens[tokens.index("--num-trials") + 1])
    assert num_trials >= 6 and tokens[tokens.index("--num-seeds") + 1] == "2"
    assert tokens[tokens.index("--workers") + 1] == "2"
    out = open(tmp_path / "first.log", "w")
    tuner = subprocess.Popen(command, cwd=root, env=tuner_env(), stdout=out, stderr=subprocess.STDOUT)
    runs = root / "studies" / "ppo__CartPole-v1" / "runs"
    total = int(next(t for t in tokens if t.startswith("total-timesteps=")).partition("=")[2])
    deadline = time.monotonic() + 240
    # a trial done, and the running runs past their start but not near their end: the stop cuts them mid-run (a run
    # that ends as the stop comes has nothing left to continue, and the resume would go untested)
    while time.monotonic() < deadline and tuner.poll() is None:
        log = (tmp_path / "first.log").read_text()
        logs = [d / "tuner.log" for d in runs.glob("*")] if runs.exists() else []
        live = [p.parent for p in logs if not p.exists() or "checkpoint:" not in p.read_text()]
        if "COMPLETE" in log and live and all(0 < follow(d).last_step <= total // 2 for d in live):
            break
        time.sleep(0.2)
    tuner.send_signal(signal.SIGTERM)
    assert tuner.wait(timeout=300) == 130, (tmp_path / "first.log").read_text()
    first = (tmp_path / "first.log").read_text()
    assert "INTERRUPTED" in first and "run the same command again" in first, first

    res = subprocess.run(command, cwd=root, env=tuner_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    study = load(f"sqlite:///{root / 'studies' / 'ppo__CartPole-v1' / 'study.db'}", "ppo__CartPole-v1")
    trials = study.get_trials()
    states = [(t.number, t.state.name, t.user_attrs.get("owner"), t.user_attrs.get("resumes")) for t in trials]
    assert len(counted(study)) == num_trials, f"{states}\n{first}\n{res.stdout}"
    interrupted = [t for t in trials if t.user_attrs.get("interrupted")]
    assert interrupted
    for t in interrupted:  # each continued by exactly one trial on the same run folders
        successors = [s for s in trials if s.user_attrs.get("resumes") == t.number]
        assert len(successors) == 1 and successors[0].user_attrs["run_key"] == t.user_attrs["run_key"]
        assert successors[0].params == t.params
    resumed = 0
    for t in interrupted:
        for run_dir in runs.glob(t.user_attrs["run_key"] + "__*"):
            attempts = run_starts(run_dir)
            # a run cut after its first checkpoint continues from it; one that the stop met as its trial began (not
            # started yet, or still starting) has nothing to continue and starts, once
            assert 1 <= len(attempts) <= 2, attempts
            if len(attempts) == 2 and "checkpoint:" in attempts[0]:
                assert "resuming from iteration" in attempts[1] or "is complete" in attempts[1], attempts
            else:
                assert "starting the run" in attempts[-1], attempts
            resumed += "resuming from iteration" in attempts[-1]
    assert resumed >= 1
    keys = {t.user_attrs["run_key"] for t in counted(study)}
    folders = {d.name.split("__")[0] for d in runs.iterdir()}
    assert folders == keys, f"{states}\n{first}\n{res.stdout}"  # no run folder orphaned
    assert processes_working_in(root) == []

    assert re.search(r"^\| trial \| state +\| score", res.stdout, re.MULTILINE), res.stdout
    best = study.best_trial
    assert best.value == max(t.value for t in trials if t.state.name == "COMPLETE")
    assert f"best trial {best.number}: normalised score {best.value:.4g}" in res.stdout
    assert f"    {best.user_attrs['command']} --env-id CartPole-v1" in res.stdout
    window = int(tokens[tokens.index("--metric-last-n-average-window") + 1])
    scores = [np.mean(follow(d).values[-window:]) / 500 for d in runs.glob(best.user_attrs["run_key"] + "__*")]
    assert len(scores) == 2 and math.isclose(best.value, float(np.mean(scores)), rel_tol=1e-6)


# ---------------------------------------------------------------------------------------------- pruned and crashed


@pytest.mark.slow
def test_a_stop_that_comes_while_a_trial_starts_its_runs_stops_them_all(tmp_path, monkeypatch):
    """SIGTERM reaching the tuner just after the first of a trial's runs has started is acted on once all its runs
    are started and recorded: every run is stopped (none left behind to hold its folder), and the same study run
    again continues the trial on its folders and counts it."""
    monkeypatch.chdir(tmp_path)
    tuner = Tuner(
        script=PPO,
        metric="charts/episodic_return",
        target_scores={"CartPole-v1": [0, 500]},
        params_fn=lambda trial: {**TINY, "learning-rate": trial.suggest_categorical("learning-rate", [2.5e-4])},
        study_name="stopped",
    )
    real_popen, sent = subprocess.Popen, []

    def popen_then_stop(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        if not sent:
            sent.append(process)
            os.kill(os.getpid(), signal.SIGTERM)
        return process

    monkeypatch.setattr(subprocess, "Popen", popen_then_stop)
    with pytest.raises(SystemExit) as stopped:
        tuner.tune(num_trials=1, num_seeds=2)
    assert stopped.value.code == 130 and sent
    assert processes_working_in(tmp_path) == []
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    study = tuner.tune(num_trials=1, num_seeds=2)
    (first, second) = study.get_trials()
    assert first.user_attrs.get("interrupted") and second.user_attrs["resumes"] == first.number
    assert second.state.name == "COMPLETE"
    folders = sorted(d.name for d in (tmp_path / "studies" / "stopped" / "runs").iterdir())
    assert folders == [f"trial0000__CartPole-v1__{seed}" for seed in (1, 2)], folders


@pytest.mark.slow
def test_a_bad_trial_is_pruned_while_it_runs_and_a_crashed_one_fails(tmp_path, monkeypatch):
    """Trial 0 crashes at its start (a batch its minibatches do not divide): FAIL with its log's last lines, and the
    study goes on; trials 1-2 learn; trial 3 (learning rate 1e-7) is pruned by the median rule well before its last
    step, and its run is gone."""
    monkeypatch.chdir(tmp_path)
    total = 65536  # the bad trial's; the good ones run 8192 steps

    def params(trial):
        bad = trial.number == 3
        return {
            "learning-rate": 1e-7 if bad else 2.5e-3,
            "num-minibatches": 3 if trial.number == 0 else 2,
            "total-timesteps": total if bad else 8192,
            "num-envs": 4,
            "num-steps": 64,
        }

    tuner = Tuner(
        script=PPO,
        metric="charts/episodic_return",
        target_scores={"CartPole-v1": [0, 500]},
        params_fn=params,
        metric_last_n_average_window=10,
        report_every=1024,
        study_name="prune",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=2048),
    )
    study = tuner.tune(num_trials=3, num_seeds=1)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE", "PRUNED"]
    assert "not divisible by --num-minibatches 3" in trials[0].user_attrs["error"]
    pruned = trials[3]
    last = max(pruned.intermediate_values)
    assert last <= 8192, pruned.intermediate_values
    run_dir = tmp_path / "studies" / "prune" / "runs" / "trial0003__CartPole-v1__1"
    assert follow(run_dir).last_step < total // 2 and run_dir.exists()
    assert processes_working_in(tmp_path) == []


# ---------------------------------------------------------------------------------------------- shared studies


def two_tuner_command(study_dir_root: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cleanrl_utils.tuner",
        "--script",
        "cleanrl/ppo.py",
        "--target-scores",
        "CartPole-v1=0,500",
        "--params",
        "learning-rate=loguniform(3e-4,3e-3)",
        *(f"{k}={v}" for k, v in TINY.items()),
        "--num-seeds",
        "1",
        "--workers",
        "1",
        "--metric-last-n-average-window",
        "5",
        "--pruner",
        "none",
        "--studies-dir",
        study_dir_root,
        "--study-name",
        "shared",
        *extra,
    ]


def run_two_tuners(root: Path, command: list[str]) -> None:
    """The same tuner command in two processes at once, both to a clean end."""
    procs = [
        subprocess.Popen(
            command, cwd=root, env=tuner_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs


def check_shared(root: Path, num_trials: int, storage: str = "journal") -> set[str]:
    folder = root / "studies" / "shared"
    study = load(
        f"journal:{folder / 'journal.log'}" if storage == "journal" else f"sqlite:///{folder / 'study.db'}", "shared"
    )
    trials = study.get_trials()
    assert len(trials) == num_trials and all(t.state.name == "COMPLETE" for t in trials), trials
    runs = sorted((root / "studies" / "shared" / "runs").iterdir())
    assert [d.name for d in runs] == [f"trial{n:04d}__CartPole-v1__1" for n in range(num_trials)]
    for run_dir in runs:  # each trial's run started once: no trial number run twice
        assert (run_dir / "tuner.log").read_text().count("\n$ ") + 1 == len(run_starts(run_dir)) == 1
    return {t.user_attrs["owner"] for t in trials}


@pytest.mark.slow
def test_two_tuner_processes_share_one_journal_study(tmp_path):
    root = scratch(tmp_path)
    run_two_tuners(root, two_tuner_command("studies", ["--num-trials", "4", "--storage", "journal"]))
    assert len(check_shared(root, 4)) == 2  # both processes ran trials


@pytest.mark.slow
@pytest.mark.slurm
def test_a_slurm_array_of_two_tuners_finishes_one_study(tmp_path, slurm_cluster):
    root = scratch(tmp_path)
    command = two_tuner_command(
        str(root / "studies"),
        [
            "--num-trials",
            "3",
            "--slurm-template-path",
            str(REPO_ROOT / "benchmark" / "slurm_tune.template"),
            "--slurm-array-tasks",
            "2",
            "--slurm-cpus-per-task",
            "1",
            "--slurm-wait",
        ],
    )
    env = {**slurm_cluster.env, **tuner_env(), "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    res = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=400)
    logs = "\n".join(p.read_text() for p in (root / "studies" / "shared" / "slurm").glob("*.log"))
    assert res.returncode == 0, res.stdout + res.stderr + logs + slurm_cluster.logs()
    assert len(list((root / "studies" / "shared" / "slurm").glob("*.log"))) == 2, logs
    check_shared(root, 3)


# ---------------------------------------------------------------------------------------------- CleanRL's example


@pytest.mark.slow
def test_cleanrl_example_runs_with_only_the_import_changed(tmp_path):
    """CleanRL's tuner example as shipped (its Tuner call, params_fn and target scores; only the import differs),
    with its numbers reduced: 1 trial, 1 seed, 10k steps (Acrobot's first games end at 500 steps per env)."""
    source = (REPO_ROOT / "benchmark" / "tuner_cleanrl_example.py").read_text()
    assert "from cleanrl_utils.tuner import Tuner" in source and "cleanrl_utils.tuner import" in source
    smaller = source.replace('"total-timesteps": 100000', '"total-timesteps": 10000')
    smaller = smaller.replace("num_trials=100", "num_trials=1").replace("num_seeds=3", "num_seeds=1")
    assert smaller.count("10000,") == 1 and "num_trials=1," in smaller and "num_seeds=1," in smaller
    root = scratch(tmp_path)
    (root / "example.py").write_text(smaller)
    res = subprocess.run(
        [sys.executable, "example.py"], cwd=root, env=tuner_env(), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "best trial 0: normalised score" in res.stdout, res.stdout
    assert "--env-id CartPole-v1" in res.stdout and "--env-id Acrobot-v1" in res.stdout
    study = load(
        f"sqlite:///{root / 'studies' / 'ppo__CartPole-v1__Acrobot-v1' / 'study.db'}", "ppo__CartPole-v1__Acrobot-v1"
    )
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and set(trial.params) == {
        "learning-rate",
        "num-minibatches",
        "update-epochs",
        "num-steps",
        "vf-coef",
        "max-grad-norm",
    }
    assert shlex.split(trial.user_attrs["command"])[:2] == ["python", "cleanrl/ppo.py"]


def test_help_names_the_options():
    res = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.tuner", "--help"],
        env=tuner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and "--num-trials" in res.stdout and "--slurm-template-path" in res.stdout


@pytest.mark.slow
def test_time_auc_stops_each_run_at_its_time_budget_and_an_ownerless_trial_is_not_waited_for(tmp_path, monkeypatch):
    """objective time_auc: each run is stopped (at a checkpoint) once it has run for the budget, and the trial's
    value is the mean normalised score over the budget, between 0 and the final score.
    The study also holds a trial left RUNNING with no owner (its tuner stopped between taking it from the storage and
    naming itself in it): the tuner fails it and runs the study to its count instead of waiting for it."""
    monkeypatch.chdir(tmp_path)
    budget = 15.0
    tuner = Tuner(
        script=PPO,
        metric="charts/episodic_return",
        target_scores={"CartPole-v1": [0, 500]},
        params_fn=lambda trial: {"total-timesteps": 10_000_000, "num-envs": 4, "num-steps": 64},
        metric_last_n_average_window=10,
        objective="time_auc",
        time_budget=budget,
        study_name="auc",
    )
    orphan = tuner.open_study(num_seeds=1).ask()  # RUNNING, no owner, no params
    study = tuner.tune(num_trials=1, num_seeds=1)
    orphaned, trial = study.get_trials()
    assert (orphaned.number, orphaned.state.name) == (orphan.number, "FAIL")
    assert (trial.number, trial.state.name) == (orphan.number + 1, "COMPLETE"), trial.user_attrs
    run_dir = tmp_path / "studies" / "auc" / "runs" / f"trial{trial.number:04d}__CartPole-v1__1"
    assert "stopping at the end of this iteration" in (run_dir / "tuner.log").read_text()
    follower = follow(run_dir)
    assert 0 < trial.value <= max(follower.values) / 500 and follower.last_step < 10_000_000
    assert trial.intermediate_values and set(trial.intermediate_values) <= {1, 3, 4, 6, 7, 9, 10, 12, 13, 15}


# ---------------------------------------------------------------------------------------------- faults around a study


def one_trial_command(extra: list[str] = (), total: int = 512) -> list[str]:
    """A study of one trial of fixed parameters (`total` steps) on the default SQLite storage."""
    fixed = {
        "learning-rate=loguniform(3e-4,3e-3)": "learning-rate=0.00025",
        "total-timesteps=512": f"total-timesteps={total}",
    }
    return [fixed.get(w, w) for w in two_tuner_command("studies", ["--num-trials", "1", *extra])]


@pytest.mark.slow
def test_a_killed_tuners_run_still_going_is_followed_and_scored_when_it_ends(tmp_path):
    """SIGKILL reaches the tuner, not its run (a process group of its own): the same command again finds the run
    still holding its folder, says so, follows it and continues it once it ends, instead of a FAIL on its lock."""
    from cleanrl_utils.launch.runs import holder

    root = scratch(tmp_path)
    command = one_trial_command(total=20000)  # fixed flags: a trial of no params is continued as well
    first = subprocess.Popen(command, cwd=root, env=tuner_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    run_dir = root / "studies" / "shared" / "runs" / "trial0000__CartPole-v1__1"
    while first.poll() is None and not (run_dir.exists() and follow(run_dir).last_step > 0):
        time.sleep(0.2)
    first.kill()
    first.wait()
    assert holder(str(run_dir)) is not None, "the run ended with its tuner"
    res = subprocess.run(command, cwd=root, env=tuner_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert re.search(r"trial 1: trial0000__CartPole-v1__1 is still running \(host .*, pid \d+", res.stdout), res.stdout
    study = load(f"sqlite:///{root / 'studies' / 'shared' / 'study.db'}", "shared")
    interrupted, continued = study.get_trials()
    assert interrupted.user_attrs.get("interrupted") and continued.user_attrs["resumes"] == interrupted.number
    assert [d.name for d in run_dir.parent.iterdir()] == [run_dir.name]
    assert continued.state.name == "COMPLETE" and continued.value > 0, continued.user_attrs
    log = (run_dir / "tuner.log").read_text()
    assert "is in use by another run" not in log and "is complete" in log.split("\n$ ")[-1], log
    assert processes_working_in(root) == []


# `python -c OPEN CWD`: a tuner's open_study on a new SQLite study in CWD, as a tuner process starts
OPEN = f"""
import os, sys
os.chdir(sys.argv[1])
from cleanrl_utils.tuner import Tuner
tuner = Tuner({PPO!r}, "charts/episodic_return", {{"CartPole-v1": [0, 500]}}, lambda t: {{}}, study_name="shared")
print(tuner.open_study(num_seeds=1).study_name)
"""


def test_tuners_started_together_on_a_new_sqlite_study_all_open_it(tmp_path):
    """Each used to create the SQLite tables itself, and all but one could stop on `UNIQUE constraint failed:
    alembic_version.version_num` or `table studies already exists`: they now take turns on the study folder's lock."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN, str(tmp_path)],
            env=tuner_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4 and all(o.strip().endswith("shared") for o in outputs), outputs
    assert len(optuna.get_all_study_summaries(f"sqlite:///{tmp_path / 'studies' / 'shared' / 'study.db'}")) == 1


@pytest.mark.slow
def test_two_tuner_processes_share_one_new_sqlite_study(tmp_path):
    root = scratch(tmp_path)
    run_two_tuners(root, two_tuner_command("studies", ["--num-trials", "4"]))
    assert len(check_shared(root, 4, storage="sqlite")) == 2  # both processes ran trials


def test_a_read_only_study_folder_is_one_line(tmp_path, monkeypatch, read_only):
    """An existing study whose folder cannot be written (a read-only copy): one line naming the folder, not a
    traceback through Optuna's lock file."""
    monkeypatch.chdir(tmp_path)
    tuner = bad(study_name="kept")
    tuner.open_study(num_seeds=1)
    read_only(tmp_path / "studies" / "kept")
    with pytest.raises(SystemExit) as exc:
        tuner.tune(num_trials=1, num_seeds=1)
    message = str(exc.value.code)
    assert message.startswith("error: cannot write in the study folder 'studies/kept' (Read-only file system)")
    assert "--studies-dir" in message and "\n" not in message


@pytest.mark.slow
def test_a_metric_no_run_logs_is_one_line_after_the_first_run_and_the_fixed_command_continues(tmp_path):
    """A typo in the metric used to run every trial to a FAIL ("no game finished", though games did): the first run
    that ends names the tags it logged, the study stops, and the command with the metric fixed continues it."""
    root = scratch(tmp_path)
    command = two_tuner_command("studies", ["--num-trials", "2"])
    res = subprocess.run(
        [*command, "--metric", "charts/episodic_retrun"],
        cwd=root,
        env=tuner_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert lines[0].startswith(
        "error: the metric 'charts/episodic_retrun' is not a scalar that ppo.py logs: trial0000__CartPole-v1__1 logged "
    ), lines[0]
    assert "charts/SPS" in lines[0] and "did you mean charts/episodic_return?" in lines[0]
    assert "trial 1 RUNNING" not in res.stdout and "Traceback" not in res.stderr

    res = subprocess.run(command, cwd=root, env=tuner_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "has scored no trial: it now scores by charts/episodic_return" in res.stdout
    study = load(f"sqlite:///{root / 'studies' / 'shared' / 'study.db'}", "shared")
    first, *rest = study.get_trials()
    assert first.user_attrs.get("interrupted") and len(counted(study)) == 2
    assert any(t.user_attrs.get("resumes") == first.number and t.state.name == "COMPLETE" for t in rest)
    assert processes_working_in(root) == []
