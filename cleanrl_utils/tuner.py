"""Hyperparameter tuning with Optuna, with CleanRL's interface (`Tuner(...)`, `tune(num_trials, num_seeds)`).

Each trial runs the real script once per env id and seed, as processes that lead their own process groups
(`python SCRIPT PARAMS --env-id E --seed S --runs-dir STUDY/runs --run-name trialNNNN__E__S --resume auto`),
`workers` trials at a time with the cores split between them. The tuner reads each run's TensorBoard events while
it runs, reports the normalised score to Optuna at fixed intervals and stops a pruned trial at once (SIGTERM: the
run checkpoints and exits). Ctrl-C or SIGTERM stops the running trials at their checkpoints; the same command again
continues the study: an interrupted trial is recorded as FAIL (user attribute `interrupted`) and its parameters are
queued again as a new trial that continues the same run folders (user attribute `run_key`), so the study ends with
exactly `num_trials` COMPLETE or PRUNED trials (docs/tuning.md).

    python -m cleanrl_utils.tuner --script cleanrl/ppo.py --target-scores CartPole-v1=0,500 \\
        --params "learning-rate=loguniform(3e-4,3e-3)" "num-minibatches=choice(1,2,4)" total-timesteps=50000 \\
        --num-trials 20 --num-seeds 2 --workers 2
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import tyro

from cleanrl_utils.launch import slurm
from cleanrl_utils.launch.processes import own_group, stop_process_groups
from cleanrl_utils.launch.runs import check_script_flags, flag_value, holder, holder_pid, make_dir, print_table
from cleanrl_utils.script_shape import read_script
from cleanrl_utils.run_events import EventFollower
from cleanrl_utils.validation import check_env_id, check_name, fail

AGGREGATIONS = ("average", "median", "max", "min")
DIRECTIONS = ("maximize", "minimize")
OBJECTIVES = ("score", "score_in_time", "time_auc")
# flags the tuner gives every run itself
TUNER_FLAGS = ("env-id", "seed", "run-name", "runs-dir", "resume")
POLL_S = 0.5
LOG_TAIL_LINES = 8
REPORTS_PER_RUN = 10  # the default report interval: a tenth of a run's steps (or of its time budget)


@dataclass
class Run:
    """One run of a trial: the script on one env id with one seed, in its own run folder."""

    env_id: str
    seed: int
    name: str
    run_dir: str
    words: list[str]
    process: Optional[subprocess.Popen] = None
    follower: Optional[EventFollower] = None
    attempts: list[list[Optional[float]]] = field(default_factory=list)  # [start, end] wall-clock times
    done: bool = False  # finished, or stopped at the time budget
    stopped: bool = False  # stopped by the tuner
    returncode: Optional[int] = None
    held_by: Optional[str] = None  # a live process of an earlier tuner that still runs in the folder: followed

    @property
    def attempts_path(self) -> str:
        return os.path.join(self.run_dir, "tuner_attempts.json")

    @property
    def log_path(self) -> str:
        return os.path.join(self.run_dir, "tuner.log")

    def active_seconds(self, wall: float) -> float:
        """How long the run had been running (over all its attempts) at the wall-clock time `wall`: each attempt
        from its first logged event (after the imports and the env's start, which a busy machine slows most) to
        its end."""
        total = 0.0
        starts = sorted(self.follower.file_starts) if self.follower else []
        for i, (start, end) in enumerate(self.attempts):
            live = self.process is not None and i == len(self.attempts) - 1
            first = next((f for f in starts if f >= start and (end is None or f <= end)), None)
            if first is None:  # nothing logged yet in this attempt
                continue
            if end is None:  # the live attempt, or one whose tuner died: until its last logged point
                end = time.time() if live else self.follower.last_wall
            total += max(0.0, min(end, wall) - first)
        return total

    def save_attempts(self) -> None:
        with open(self.attempts_path, "w") as f:
            json.dump(self.attempts, f)


class UnknownMetric(Exception):
    """A run ended without logging the metric, which its script never names: a tag that does not exist."""


@dataclass
class ActiveTrial:
    trial: Any  # optuna.Trial
    runs: list[Run]
    started: float
    earlier_s: float  # wall time of the attempts before this one (a continued trial)
    threads: int = 1  # each run's threads
    reported: set = field(default_factory=set)


class Tuner:
    """CleanRL's tuner (same arguments, same normalised score), running trials as processes (see the module doc).

    Beyond CleanRL's arguments: `workers` trials at once; `studies_dir`, the folder of the study folders;
    `objective` "score" (CleanRL's: the score at the end of each run), "score_in_time" (the score reached within
    `time_budget` seconds of each run) or "time_auc" (the mean score over the first `time_budget` seconds: the area
    under the score-vs-time curve); `report_every`, the interval of the reports to the pruner (steps, or seconds for
    the time objectives); `cores`, the cores the trials share (default: those this process may use)."""

    def __init__(
        self,
        script: str,
        metric: str,
        target_scores: dict[str, Optional[list[float]]],
        params_fn: Callable[[Any], dict[str, Any]],
        direction: str = "maximize",
        aggregation_type: str = "average",
        metric_last_n_average_window: int = 50,
        sampler=None,
        pruner=None,
        storage: Optional[str] = None,
        study_name: str = "",
        wandb_kwargs: Optional[dict] = None,
        workers: int = 1,
        studies_dir: str = "studies",
        objective: str = "score",
        time_budget: Optional[float] = None,
        report_every: Optional[float] = None,
        cores: Optional[int] = None,
    ) -> None:
        self.script = script
        self.metric = metric
        self.target_scores = target_scores
        self.params_fn = params_fn
        self.direction = direction
        self.aggregation_type = aggregation_type
        self.window = metric_last_n_average_window
        self.sampler = sampler
        self.pruner = pruner
        self.storage = storage
        self.study_name = study_name
        self.wandb_kwargs = wandb_kwargs or {}
        self.workers = workers
        self.studies_dir = studies_dir
        self.objective = objective
        self.time_budget = time_budget
        self.report_every = report_every
        self.cores = cores or len(os.sched_getaffinity(0))
        self.env_ids = list(target_scores) if isinstance(target_scores, dict) else []
        stem = os.path.splitext(os.path.basename(script))[0]
        self.study_name = study_name or "__".join([stem, *(e.replace("/", "-") for e in self.env_ids)])
        self.study_dir = os.path.join(studies_dir, self.study_name)
        self.runs_root = os.path.join(self.study_dir, "runs")

    # ------------------------------------------------------------------------------------------ checks (write nothing)

    def check(self, num_trials: int, num_seeds: int) -> None:
        """Every input, before anything is written or run: one `error: ...` line for the first bad one."""
        if not os.path.isfile(self.script):
            fail(f"script {self.script!r} not found")
        if not isinstance(self.target_scores, dict) or not self.target_scores:
            fail("target_scores must name at least one env id, e.g. {'CartPole-v1': [0, 500]}")
        for env_id, target in self.target_scores.items():
            check_env_id(env_id)
            if target is None:
                if len(self.target_scores) > 1:
                    fail(
                        f"{env_id} has no target scores: with several envs each needs [min, max] to put the scores "
                        "on one scale, e.g. {'CartPole-v1': [0, 500], 'Acrobot-v1': [-500, 0]}"
                    )
            elif len(target) != 2 or not all(isinstance(x, (int, float)) for x in target) or target[0] >= target[1]:
                fail(f"the target scores of {env_id} must be [min, max] with min < max, got {target}")
        if self.aggregation_type not in AGGREGATIONS:
            fail(f"unknown aggregation_type {self.aggregation_type!r}; use one of {', '.join(AGGREGATIONS)}")
        if self.direction not in DIRECTIONS:
            fail(f"unknown direction {self.direction!r}; use one of {', '.join(DIRECTIONS)}")
        if self.objective not in OBJECTIVES:
            fail(f"unknown objective {self.objective!r}; use one of {', '.join(OBJECTIVES)}")
        if self.objective != "score" and not (self.time_budget and self.time_budget > 0):
            fail(
                f"the objective {self.objective} needs a positive time budget (seconds per run), e.g. --time-budget 60"
            )
        for name, value in (
            ("num_trials", num_trials),
            ("num_seeds", num_seeds),
            ("workers", self.workers),
            ("metric_last_n_average_window", self.window),
        ):
            if not isinstance(value, int) or value <= 0:
                fail(f"{name} must be a positive whole number, got {value}")
        if self.report_every is not None and self.report_every <= 0:
            fail(f"report_every must be positive, got {self.report_every}")
        check_name("the study name", self.study_name, "a study is one folder inside the studies folder")
        self._check_params()

    def _check_params(self) -> None:
        """The flags params_fn gives a sampled trial parse for the script (its own `Args`), on every env id."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
        try:
            params = self.params_fn(trial)
        except Exception as exc:  # the user's function
            fail(f"params_fn failed on a sampled trial: {type(exc).__name__}: {exc}")
        if not isinstance(params, dict):
            fail(f"params_fn must return a dict of flag name -> value, got {type(params).__name__}")
        for key in params:
            if str(key).lstrip("-").replace("_", "-") in TUNER_FLAGS:
                fail(
                    f"params_fn must not set {key!r}: the tuner gives every run its --env-id, --seed, --run-name, "
                    "--runs-dir and --resume"
                )
        words = flag_words(params)
        for env_id in self.env_ids:
            try:
                check_script_flags(self.script, [*words, "--env-id", env_id, "--seed", "1"])
            except SystemExit as exc:
                fail(str(exc.code).removeprefix("error: ").replace("the command's flags", "the flags of params_fn"))

    # ------------------------------------------------------------------------------------------ the study

    def storage_url(self) -> str:
        if self.storage in (None, ""):
            return f"sqlite:///{os.path.abspath(os.path.join(self.study_dir, 'study.db'))}"
        if self.storage == "journal":
            return "journal:///" + os.path.abspath(os.path.join(self.study_dir, "journal.log")).lstrip("/")
        return self.storage

    def open_storage(self):
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        url = self.storage_url()
        try:
            if url.startswith("journal:"):
                path = url[len("journal:") :]
                path = "/" + path.lstrip("/") if path.startswith("///") else path
                return optuna.storages.JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
            return optuna.storages.RDBStorage(url)
        except Exception as exc:
            fail(f"cannot open the storage {url} ({first_line(exc)})")

    def settings(self, num_seeds: int) -> dict[str, Any]:
        """What the study's scores mean: a rerun that changes any of it needs another study."""
        return {
            "script": self.script,
            "target_scores": {k: v and list(v) for k, v in self.target_scores.items()},
            "metric": self.metric,
            "window": self.window,
            "direction": self.direction,
            "aggregation_type": self.aggregation_type,
            "num_seeds": num_seeds,
            "objective": self.objective,
            "time_budget": self.time_budget,
        }

    def open_study(self, num_seeds: int):
        import optuna

        user_storage = self.storage not in (None, "", "journal")
        storage = self.open_storage() if user_storage else None  # a bad URL fails before the study folder is made
        make_dir(self.runs_root, "the study folder")
        check_writable(self.study_dir)
        settings = self.settings(num_seeds)
        with self.study_lock():  # tuners started together: one creates the storage's tables, then the study
            storage = storage or self.open_storage()
            try:
                study = optuna.load_study(
                    study_name=self.study_name, storage=storage, sampler=self.sampler, pruner=self.pruner
                )
            except KeyError:
                study = optuna.create_study(
                    study_name=self.study_name,
                    storage=storage,
                    sampler=self.sampler,
                    pruner=self.pruner,
                    direction=self.direction,
                    load_if_exists=True,
                )
                study.set_user_attr("tuner", settings)
        stored = study.user_attrs.get("tuner")
        if stored is not None and json.loads(json.dumps(settings)) != stored:
            differ = ", ".join(k for k in settings if stored.get(k) != json.loads(json.dumps(settings))[k])
            scored = [t for t in study.get_trials(deepcopy=False) if t.state.name in ("COMPLETE", "PRUNED")]
            if differ == "metric" and not scored:  # (a metric that no run logs stopped it before any score)
                say(f"note: the study {self.study_name!r} has scored no trial: it now scores by {self.metric}")
                study.set_user_attr("tuner", settings)
                return study
            fail(
                f"the study {self.study_name!r} in {self.storage_url()} was started with other settings ({differ}); "
                "give another study name to start a new study"
            )
        return study

    def next_trial(self, study, num_trials: int):
        """Under the study's lock (several tuner processes may share it): trials of dead tuner processes on this
        host are marked interrupted, every interrupted trial is queued again once, and a trial is started if the
        study still needs one; else None."""
        import optuna

        TrialState = optuna.trial.TrialState
        with self.study_lock():
            trials = study.get_trials(deepcopy=False)
            host = socket.gethostname()
            for t in trials:
                owner = t.user_attrs.get("owner", "")
                # no owner: a tuner stopped between taking the trial and naming itself (both happen under this lock)
                if t.state == TrialState.RUNNING and (
                    not owner or owner.split(":")[0] == host and not pid_alive(owner)
                ):
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
            trials = study.get_trials(deepcopy=False)
            counts = {s: sum(t.state == s for t in trials) for s in TrialState}
            taken = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] + counts[TrialState.RUNNING]
            if not counts[TrialState.WAITING] and taken >= num_trials:
                return None
            trial = study.ask()
            trial.set_user_attr("owner", owner_id())
            if "run_key" not in trial.user_attrs:
                trial.set_user_attr("run_key", f"trial{trial.number:04d}")
            return trial

    @contextlib.contextmanager
    def study_lock(self):
        """The study folder's lock file, held by one tuner process at a time (several may share the study)."""
        from optuna.storages.journal import JournalFileOpenLock

        lock = JournalFileOpenLock(os.path.join(self.study_dir, "study"))
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    # ------------------------------------------------------------------------------------------ runs

    def threads_per_run(self, num_seeds: int) -> int:
        return max(1, self.cores // self.workers // (num_seeds * len(self.env_ids)))

    def prepare_trial(self, trial, num_seeds: int) -> ActiveTrial:
        """The trial's runs (env ids x seeds) in their run folders, not started yet."""
        params = self.params_fn(trial)
        words = flag_words(params)
        trial.set_user_attr("command", shlex.join(["python", self.script, *words]))
        threads = self.threads_per_run(num_seeds)
        thread_words, shape = [], read_script(self.script)
        for name in ("torch_threads", "env_threads"):  # each run's share of the cores, where the script has the flag
            if shape is not None and shape.has_field(name) and f"--{name.replace('_', '-')}" not in words:
                thread_words += [f"--{name.replace('_', '-')}", str(threads)]
        runs = []
        key = trial.user_attrs["run_key"]
        for env_id in self.env_ids:
            for seed in range(1, num_seeds + 1):
                name = f"{key}__{env_id.replace('/', '-')}__{seed}"
                run_dir = os.path.join(self.runs_root, name)
                run = Run(
                    env_id,
                    seed,
                    name,
                    run_dir,
                    [
                        sys.executable,
                        self.script,
                        *words,
                        *thread_words,
                        "--env-id",
                        env_id,
                        "--seed",
                        str(seed),
                        "--runs-dir",
                        self.runs_root,
                        "--run-name",
                        name,
                        "--resume",
                        "auto",
                    ],
                )
                os.makedirs(run_dir, exist_ok=True)
                if os.path.exists(run.attempts_path):
                    with open(run.attempts_path) as f:
                        run.attempts = json.load(f)
                run.follower = EventFollower(run_dir, self.metric)
                run.follower.poll()
                # a run whose time budget was spent before its trial was interrupted is not started again
                run.done = bool(
                    self.time_budget and self.objective != "score" and run.active_seconds(math.inf) >= self.time_budget
                )
                runs.append(run)
        earlier = float(trial.user_attrs.get("earlier_wall_time_s", 0.0))
        resumed = f" (continues trial {trial.user_attrs['resumes']})" if "resumes" in trial.user_attrs else ""
        say(f"trial {trial.number} RUNNING{resumed}: {len(runs)} run(s), {threads} thread(s) each: {' '.join(words)}")
        return ActiveTrial(trial, runs, time.monotonic(), earlier, threads=threads)

    def start_runs(self, active: ActiveTrial) -> None:
        """Start the runs not done; one that an earlier tuner's run still holds (its tuner was killed, its run was
        not) is followed as it goes and continued once it lets go of its folder (a second start would stop on its
        lock)."""
        for run in active.runs:
            if run.done:
                continue
            run.held_by = holder(run.run_dir)
            if run.held_by is None:
                self.start_run(run, self.run_env(active))
            else:
                say(
                    f"trial {active.trial.number}: {run.name} is still running ({run.held_by}), started by an "
                    "earlier tuner: following it, and continuing it when it ends"
                )

    @staticmethod
    def run_env(active: ActiveTrial) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(active.threads)}

    def start_run(self, run: Run, env: dict[str, str]) -> None:
        with open(run.log_path, "a") as log:
            log.write(f"$ {shlex.join(run.words)}\n")
            log.flush()
            run.process = subprocess.Popen(
                run.words, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, **own_group()
            )
        run.attempts.append([time.time(), None])
        run.save_attempts()

    def end_runs(self, runs: list[Run]) -> None:
        """Stop the runs still running (SIGTERM to their process groups: they checkpoint and exit), the followed runs
        of an earlier tuner on this host too."""
        live = [r for r in runs if r.process is not None and r.process.poll() is None]
        for run in live:
            run.stopped = True
        for run in runs:
            pid = holder_pid(run.held_by) if run.held_by else None
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    try:
                        os.killpg(pid, signal.SIGTERM)  # it leads its process group, as the tuner started it
                    except ProcessLookupError:
                        os.kill(pid, signal.SIGTERM)
            run.held_by = None
        stop_process_groups([r.process for r in live])
        for run in runs:
            self.finish_run(run)

    def finish_run(self, run: Run) -> None:
        if run.process is None:
            return
        run.returncode = run.process.wait()
        run.attempts[-1][1] = time.time()
        run.save_attempts()
        run.process = None

    # ------------------------------------------------------------------------------------------ scores

    def normalised(self, env_id: str, score: Optional[float]) -> Optional[float]:
        target = self.target_scores[env_id]
        if score is None or target is None:
            return score
        return (score - target[0]) / (target[1] - target[0])

    def run_times(self, run: Run) -> np.ndarray:
        return np.array([run.active_seconds(w) for w in run.follower.walls])

    def run_value(self, run: Run, until: float = math.inf) -> Optional[float]:
        """The run's normalised score up to `until` (steps for the objective "score", else seconds of running)."""
        if self.objective == "score":
            return self.normalised(run.env_id, run.follower.mean_last(self.window, until_step=until))
        times = self.run_times(run)
        limit = min(until, self.time_budget)
        if self.objective == "score_in_time" or until < math.inf:
            return self.normalised(run.env_id, run.follower.mean_last(self.window, times=times, until_time=limit))
        # time_auc: the mean over [0, budget] of the score so far (0 before the first game; a run that finished
        # early keeps its final score until the budget)
        values = np.array(run.follower.values)[times <= limit]
        times = times[times <= limit]
        if not len(values):
            return None
        means = [
            self.normalised(run.env_id, float(np.mean(values[max(0, i + 1 - self.window) : i + 1])))
            for i in range(len(values))
        ]
        ends = np.append(times[1:], limit)
        return float(np.sum(np.array(means) * (ends - times)) / limit)

    def aggregate(self, values: dict[tuple[str, int], Optional[float]]) -> Optional[float]:
        """CleanRL's score: per seed the env ids' normalised scores aggregated, then the mean over seeds."""
        if any(v is None for v in values.values()):
            return None
        seeds = sorted({seed for _, seed in values})
        per_seed = [getattr(np, self.aggregation_type)([values[(e, s)] for e in self.env_ids]) for s in seeds]
        return float(np.mean(per_seed))

    def default_report_every(self, trial) -> float:
        if self.objective != "score":
            return self.time_budget / REPORTS_PER_RUN
        total = flag_value(flag_words(self.params_fn(trial)), "--total-timesteps")
        try:
            return max(1, int(float(total) // REPORTS_PER_RUN)) if total else 10000
        except ValueError:
            return 10000

    def progress(self, run: Run) -> float:
        """How far the run has logged: its step, or for the time objectives its seconds of running."""
        if self.objective == "score":
            return run.follower.last_step
        return run.active_seconds(run.follower.last_wall) if run.follower.last_wall else 0.0

    # ------------------------------------------------------------------------------------------ one trial's step

    def poll_trial(self, study, active: ActiveTrial, every: float) -> Optional[str]:
        """Read the runs' new events, stop runs at the time budget, report to the pruner; the trial's end state
        (COMPLETE, PRUNED, FAIL) once it ends, else None."""
        for run in active.runs:
            run.follower.poll()
            if run.held_by is not None and holder(run.run_dir) is None:  # the earlier tuner's run ended: continue it
                run.held_by = None
                self.start_run(run, self.run_env(active))
            if run.process is not None and run.process.poll() is not None:
                self.finish_run(run)
                run.done = run.returncode == 0
                run.follower.poll()
                if run.done:
                    self.check_metric(run)
                if not run.done:
                    self.end_runs(active.runs)
                    lines = log_tail(run.log_path)
                    active.trial.set_user_attr(
                        "error", f"{run.name} exited with {run.returncode}: " + " | ".join(lines)
                    )
                    say(
                        f"trial {active.trial.number} FAILED: {run.name} exited with {run.returncode}; last lines of "
                        f"{run.log_path}:\n" + "\n".join(f"    {line}" for line in lines)
                    )
                    return "FAIL"
            if (
                self.objective != "score"
                and (run.process is not None or run.held_by is not None)
                and run.active_seconds(time.time()) >= self.time_budget
            ):
                self.end_runs([run])
                run.done = True
        live = [r for r in active.runs if not r.done]
        reach = min(map(self.progress, live)) if live else max(map(self.progress, active.runs))
        point = every
        while point <= reach:
            if point not in active.reported:
                value = self.aggregate({(r.env_id, r.seed): self.run_value(r, point) for r in active.runs})
                if value is not None:
                    active.trial.report(value, int(point))
                    active.reported.add(point)
                    if active.trial.should_prune():
                        self.end_runs(active.runs)
                        return "PRUNED"
            point += every
        if all(r.done for r in active.runs):
            return "COMPLETE"
        return None

    def check_metric(self, run: Run) -> None:
        """A run that ended without a point of the metric: a script that names the metric logs it once a game ends
        (too short a run); one that does not name it never will (a typo): UnknownMetric, naming the tags it logged."""
        if self.metric in run.follower.tags:
            return
        with open(self.script, errors="replace") as f:
            if self.metric in f.read():
                return
        tags = sorted(run.follower.tags)
        close = difflib.get_close_matches(self.metric, tags, n=1)
        raise UnknownMetric(
            f"the metric {self.metric!r} is not a scalar that {os.path.basename(self.script)} logs: "
            f"{run.name} logged {', '.join(tags) or 'none'}"
            + (f"; did you mean {close[0]}?" if close else "")
            + " Run again with one of them as the metric: the same study continues its trials"
        )

    def end_trial(self, study, active: ActiveTrial, state: str) -> str:
        """Record the trial's end; returns its state (a trial whose runs logged no game fails)."""
        import optuna

        TrialState = optuna.trial.TrialState
        trial = active.trial
        seconds = active.earlier_s + time.monotonic() - active.started
        trial.set_user_attr("wall_time_s", round(seconds, 1))
        value = None
        if state == "COMPLETE":
            value = self.aggregate({(r.env_id, r.seed): self.run_value(r) for r in active.runs})
            if value is None:
                trial.set_user_attr("error", "no game finished in a run: the metric has no value")
                say(f"trial {trial.number} FAILED: no game finished in a run, so {self.metric} has no value")
                state = "FAIL"
        if state == "COMPLETE":
            study.tell(trial, value)
        else:
            study.tell(trial, state=getattr(TrialState, state))
        shown = value if value is not None else (trial_value(study, trial.number) if state == "PRUNED" else None)
        if state != "FAIL":
            say(f"trial {trial.number} {state}: score {fmt(shown)} in {seconds:.1f}s")
        if self.wandb_kwargs:
            log_to_wandb(self.wandb_kwargs, trial, state, shown)
        return state

    # ------------------------------------------------------------------------------------------ the loop

    def tune(self, num_trials: int, num_seeds: int):
        """Run the study to `num_trials` COMPLETE or PRUNED trials; returns the Optuna study."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.check(num_trials, num_seeds)
        if self.wandb_kwargs:
            try:
                import wandb  # noqa: F401
            except ImportError:
                fail("wandb_kwargs needs wandb: pip install -e '.[track]'")
        study = self.open_study(num_seeds)
        say(
            f"study {self.study_name}: {num_trials} trials x {num_seeds} seed(s) x {len(self.env_ids)} env(s), "
            f"{self.workers} at a time on {self.cores} core(s); storage {self.storage_url()}; runs in {self.runs_root}"
        )
        active: list[ActiveTrial] = []
        every: dict[int, float] = {}
        failures_in_a_row = 0

        # a stop (SIGTERM, Ctrl-C) is acted on between the loop's steps, never inside one: a trial half taken from
        # the storage or a run half started would be lost to the next tuner (Python runs the handler in this thread)
        stop_requested: list[int] = []

        def stop(signum, frame):
            stop_requested.append(signum)

        previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                while len(active) < self.workers and not stop_requested:
                    trial = self.next_trial(study, num_trials)
                    if trial is None:
                        break
                    every[trial.number] = self.report_every or self.default_report_every(trial)
                    active.append(self.prepare_trial(trial, num_seeds))
                    self.start_runs(active[-1])
                if stop_requested:
                    raise KeyboardInterrupt
                if not active:
                    elsewhere = [t.number for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]
                    if elsewhere:
                        say(f"nothing left to start here; trial(s) {', '.join(map(str, elsewhere))} run elsewhere")
                    break
                time.sleep(POLL_S)
                for item in list(active):
                    try:
                        state = self.poll_trial(study, item, every[item.trial.number])
                    except UnknownMetric as exc:  # every trial would fail the same way: stop them to continue later
                        self.interrupt(study, active)
                        fail(str(exc))
                    if state is not None:
                        active.remove(item)
                        state = self.end_trial(study, item, state)
                        failures_in_a_row = failures_in_a_row + 1 if state == "FAIL" else 0
                if failures_in_a_row >= max(3, self.workers):
                    self.interrupt(study, active)
                    fail(f"{failures_in_a_row} trials in a row failed (see their lines above): the study stops")
        except KeyboardInterrupt:
            for s in previous:  # a second Ctrl-C must not cut the clean-up short
                signal.signal(s, signal.SIG_IGN)
            say(f"interrupted: stopping {len(active)} running trial(s) at their checkpoints")
            self.interrupt(study, active)
            print_trials(study)
            print(
                f"error: interrupted; run the same command again to continue the study {self.study_name}",
                file=sys.stderr,
            )
            raise SystemExit(130) from None
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        print_trials(study)
        print_best(study, self.env_ids, num_seeds)
        return study

    def interrupt(self, study, active: list[ActiveTrial]) -> None:
        """Stop every running trial's runs at their checkpoints; record the trials as interrupted (FAIL) so that the
        next tuner queues them again on the same run folders."""
        import optuna

        self.end_runs([r for item in active for r in item.runs])
        for item in active:
            seconds = item.earlier_s + time.monotonic() - item.started
            item.trial.set_user_attr("wall_time_s", round(seconds, 1))
            if had_runs(item.trial):  # a trial stopped before its params has no runs to resume: a fresh one replaces it
                item.trial.set_user_attr("interrupted", True)
            study.tell(item.trial, state=optuna.trial.TrialState.FAIL)
            say(f"trial {item.trial.number} INTERRUPTED after {seconds:.1f}s (continues on the next start)")
        active.clear()


# ---------------------------------------------------------------------------------------------- helpers


def flag_words(params: dict[str, Any]) -> list[str]:
    """CleanRL's params (flag names without `--`) as command-line words; True/False as `--x`/`--no-x`."""
    words: list[str] = []
    for key, value in params.items():
        name = str(key).lstrip("-")
        if isinstance(value, bool):
            words.append(f"--{name}" if value else f"--no-{name}")
        elif isinstance(value, (list, tuple)):
            words += [f"--{name}", *map(str, value)]
        elif value is not None:
            words += [f"--{name}", str(value)]
    return words


def owner_id() -> str:
    """This tuner process: host, pid and the process's start time (pids are reused: on a busy machine soon)."""
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


def check_writable(folder: str) -> None:
    """The study folder takes new files (its lock, storage, runs), else one line (a read-only copy of a study)."""
    try:
        fd, path = tempfile.mkstemp(dir=folder, prefix=".writable_")
        os.close(fd)
        os.unlink(path)
    except OSError as exc:
        fail(
            f"cannot write in the study folder {folder!r} ({exc.strerror}): the tuner keeps the study's lock, "
            "storage and runs there; make it writable, or copy it and pass the copy's folder as --studies-dir"
        )


def had_runs(trial) -> bool:
    """Whether the trial had made its runs (its command is recorded first; a study of fixed flags has no params)."""
    return bool(trial.params) or "command" in trial.user_attrs


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
    except OSError:
        return []


def say(line: str) -> None:
    print(line, flush=True)


def fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def trial_value(study, number: int) -> Optional[float]:
    trial = study.get_trials(deepcopy=False)[number]
    if trial.value is not None:
        return trial.value
    steps = trial.intermediate_values
    return steps[max(steps)] if steps else None


def state_text(trial) -> str:
    if trial.state.name == "FAIL" and trial.user_attrs.get("interrupted"):
        return "INTERRUPTED"
    return trial.state.name


def print_trials(study) -> None:
    """Every trial: number, state, score (a pruned trial's last report), wall time, parameters."""
    trials = study.get_trials(deepcopy=False)
    names = sorted({k for t in trials for k in t.params})
    header = ["trial", "state", "score", "wall s", *names]
    rows = [
        [
            str(t.number),
            state_text(t),
            fmt(trial_value(study, t.number)),
            f"{t.user_attrs.get('wall_time_s', 0):.1f}",
            *(fmt_param(t.params.get(n)) for n in names),
        ]
        for t in trials
    ]
    print_table(header, rows)


def fmt_param(value) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def print_best(study, env_ids: list[str], num_seeds: int) -> None:
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not done:
        print("no trial completed: no best trial")
        return
    best = study.best_trial
    print(f"best trial {best.number}: normalised score {best.value:.4g} (over {num_seeds} seed(s)); its command:")
    for env_id in env_ids:
        print(f"    {best.user_attrs.get('command', '')} --env-id {shlex.quote(env_id)}")


def log_to_wandb(wandb_kwargs: dict, trial, state: str, value: Optional[float]) -> None:
    """One W&B run per trial, as CleanRL's tuner keeps them (not tested online)."""
    import wandb

    run = wandb.init(**wandb_kwargs, name=f"trial-{trial.number}", config=trial.params, reinit=True)
    run.log({"value": value, "state": state, "trial": trial.number})
    run.finish()


# ---------------------------------------------------------------------------------------------- the command line

PARAM_SPEC = re.compile(r"^(\w+)\((.*)\)$")


def parse_value(text: str):
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def param_spec(text: str) -> tuple[str, Callable[[Any], Any]]:
    """`name=VALUE` (fixed), `name=uniform(a,b)`, `name=loguniform(a,b)`, `name=int(a,b)`, `name=choice(a,b,...)`:
    the flag name and a function of the trial that gives its value."""
    name, sep, spec = text.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not name:
        fail(f"--params {text!r}: give NAME=VALUE or NAME=uniform(a,b) / loguniform(a,b) / int(a,b) / choice(a,b,...)")
    match = PARAM_SPEC.match(spec.strip())
    if match is None or match.group(1) not in ("uniform", "loguniform", "int", "choice"):
        value = parse_value(spec)
        return name, lambda trial: value
    kind, values = match.group(1), [parse_value(v) for v in match.group(2).split(",")]
    if kind == "choice":
        return name, lambda trial: trial.suggest_categorical(name, values)
    if (
        len(values) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        or values[0] >= values[1]
    ):
        fail(f"--params {text!r}: {kind} takes two numbers low,high with low < high")
    if kind == "int":
        if not all(isinstance(v, int) for v in values):
            fail(f"--params {text!r}: int takes two whole numbers")
        return name, lambda trial: trial.suggest_int(name, values[0], values[1])
    if kind == "loguniform" and values[0] <= 0:
        fail(f"--params {text!r}: loguniform needs a positive low end")
    return name, lambda trial: trial.suggest_float(name, values[0], values[1], log=kind == "loguniform")


def params_function(specs: list[str]) -> Callable[[Any], dict[str, Any]]:
    parsed = [param_spec(s) for s in specs]
    return lambda trial: {name: suggest(trial) for name, suggest in parsed}


def target_scores_of(specs: list[str]) -> dict[str, Optional[list[float]]]:
    """`ENV=MIN,MAX` (or `ENV` alone: raw scores, one env only) -> CleanRL's target_scores."""
    targets: dict[str, Optional[list[float]]] = {}
    for spec in specs:
        env_id, sep, bounds = spec.partition("=")
        if not sep:
            targets[env_id] = None
            continue
        try:
            targets[env_id] = [float(x) for x in bounds.split(",")]
        except ValueError:
            fail(f"--target-scores {spec!r}: give ENV=MIN,MAX, e.g. CartPole-v1=0,500")
    return targets


@dataclass
class Args:
    script: str = "cleanrl/ppo.py"
    """the training script whose flags are tuned"""
    target_scores: list[str] = field(default_factory=lambda: ["CartPole-v1=0,500"])
    """the env ids and their score range for the normalisation, `ENV=MIN,MAX` (`ENV` alone: raw score, one env)"""
    params: list[str] = field(default_factory=list)
    """the script's flags: `NAME=VALUE` (fixed), `NAME=uniform(a,b)`, `NAME=loguniform(a,b)`, `NAME=int(a,b)`,
    `NAME=choice(a,b,...)` (names without `--`, e.g. `learning-rate=loguniform(3e-4,3e-3)`)"""
    num_trials: int = 20
    """the trials the study ends with (COMPLETE or PRUNED; interrupted and failed ones do not count)"""
    num_seeds: int = 2
    """the seeds each trial runs per env id (1, 2, ...)"""
    workers: int = 1
    """trials at a time on this machine; the cores are split between them"""
    metric: str = "charts/episodic_return"
    """the TensorBoard scalar that scores a run"""
    metric_last_n_average_window: int = 50
    """a run's score: the mean of its last this many points of the metric"""
    direction: str = "maximize"
    """`maximize` or `minimize` the score"""
    aggregation_type: str = "average"
    """how the envs' normalised scores combine: average, median, max or min"""
    objective: str = "score"
    """`score` (at the end of each run), `score_in_time` (reached within --time-budget seconds of each run) or
    `time_auc` (the mean score over the first --time-budget seconds)"""
    time_budget: Optional[float] = None
    """seconds of running per run, for the time objectives (each run is stopped at its budget)"""
    report_every: Optional[float] = None
    """report to the pruner every this many steps (seconds for the time objectives); default: a tenth of a run"""
    pruner: str = "median"
    """`median` (Optuna's MedianPruner) or `none`"""
    pruner_startup_trials: int = 5
    """the median pruner prunes nothing until this many trials completed"""
    pruner_warmup_steps: int = 0
    """the median pruner prunes no trial before this step (seconds for the time objectives)"""
    sampler: str = "tpe"
    """`tpe` or `random`"""
    sampler_seed: Optional[int] = None
    """the sampler's seed"""
    storage: Optional[str] = None
    """an Optuna storage URL; default: SQLite in the study folder; `journal`: a journal file there (several tuner
    processes, e.g. Slurm array tasks, over a shared filesystem)"""
    study_name: str = ""
    """the study's name and folder; default: SCRIPT__ENV_IDS"""
    studies_dir: str = "studies"
    """the folder of the study folders (runs, storage)"""
    cores: Optional[int] = None
    """the cores the trials share; default: those this process may use"""
    slurm_template_path: Optional[str] = None
    """an sbatch template (benchmark/slurm_tune.template): run the study as a Slurm job array of tuner processes
    sharing a journal storage"""
    slurm_array_tasks: int = 2
    """the array's tasks (tuner processes), each running --workers trials at a time"""
    slurm_cpus_per_task: Optional[int] = None
    """CPUs per array task; unset leaves Slurm's default"""
    slurm_partition: Optional[str] = None
    """the Slurm partition; unset uses the cluster's default"""
    slurm_time: Optional[int] = None
    """the time limit of a task in minutes: it stops its trials at their checkpoints before it and is requeued"""
    slurm_wait: bool = False
    """submit with `sbatch --wait` (block until every task ends)"""
    slurm_submit: bool = True
    """submit the rendered script with sbatch (else only write it)"""


def tuner_of(args: Args) -> Tuner:
    import optuna

    if args.pruner not in ("median", "none"):
        fail(f"unknown pruner {args.pruner!r}; use median or none")
    if args.sampler not in ("tpe", "random"):
        fail(f"unknown sampler {args.sampler!r}; use tpe or random")
    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=args.pruner_startup_trials, n_warmup_steps=args.pruner_warmup_steps
        )
        if args.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    sampler = (
        optuna.samplers.TPESampler(seed=args.sampler_seed)
        if args.sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=args.sampler_seed)
    )
    return Tuner(
        script=args.script,
        metric=args.metric,
        target_scores=target_scores_of(args.target_scores),
        params_fn=params_function(args.params),
        direction=args.direction,
        aggregation_type=args.aggregation_type,
        metric_last_n_average_window=args.metric_last_n_average_window,
        sampler=sampler,
        pruner=pruner,
        storage=args.storage,
        study_name=args.study_name,
        workers=args.workers,
        studies_dir=args.studies_dir,
        objective=args.objective,
        time_budget=args.time_budget,
        report_every=args.report_every,
        cores=args.cores,
    )


def without_slurm_flags(argv: list[str]) -> list[str]:
    """The command line of one array task: this one without its --slurm-* flags."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith("--slurm-") or word.startswith("--no-slurm-"):
            skip = "=" not in word and word not in (
                "--slurm-wait",
                "--no-slurm-wait",
                "--slurm-submit",
                "--no-slurm-submit",
            )
        else:
            words.append(word)
    return words


def run_slurm(args: Args, argv: list[str], tuner: Tuner) -> int:
    """A job array of tuner processes on one study in a journal file (the one storage that a shared filesystem
    serves to processes on several nodes)."""
    if args.storage not in (None, "journal") and not args.storage.startswith("journal:"):
        fail(f"--storage {args.storage}: a Slurm array shares its study through a journal file; use --storage journal")
    if not os.path.isfile(args.slurm_template_path):
        fail(f"Slurm template {args.slurm_template_path!r} not found (benchmark/slurm_tune.template is shipped)")
    if args.slurm_array_tasks <= 0:
        fail(f"--slurm-array-tasks must be positive, got {args.slurm_array_tasks}")
    task = [sys.executable, "-m", "cleanrl_utils.tuner", *without_slurm_flags(argv)]
    if args.storage is None:
        task += ["--storage", "journal"]
    tuner.storage = tuner.storage or "journal"
    tuner.check(args.num_trials, args.num_seeds)
    log_dir = os.path.join(tuner.study_dir, "slurm")
    values = {
        "job_name": tuner.study_name,
        "partition": args.slurm_partition,
        "array": f"0-{args.slurm_array_tasks - 1}",
        "cpus_per_task": args.slurm_cpus_per_task and str(args.slurm_cpus_per_task),
        "time": args.slurm_time and str(args.slurm_time),
        "log_dir": os.path.abspath(log_dir),
        "workdir": shlex.quote(os.getcwd()),
        "command": shlex.join(task),
        "signal_seconds": args.slurm_time and str(slurm.time_limit_signal(args.slurm_time)),
        "requeue_trap": slurm.REQUEUE_TRAP,
    }
    with open(args.slurm_template_path) as f:
        script = slurm.render(f.read(), values)
    path = os.path.join(tuner.study_dir, f"{tuner.study_name}.sbatch")
    slurm.write_script(path, script, log_dir)
    print(
        f"wrote {path}: a job array of {args.slurm_array_tasks} tuner processes on study {tuner.study_name} "
        f"(storage {tuner.storage_url()})"
    )
    if not args.slurm_submit:
        print(f"submit it with: {shlex.join(slurm.sbatch_command(path, args.slurm_wait))}")
        return 0
    return slurm.submit(path, args.slurm_wait, log_dir)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(Args, args=argv)
    tuner = tuner_of(args)
    if args.slurm_template_path is not None:
        return run_slurm(args, argv, tuner)
    tuner.tune(args.num_trials, args.num_seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
