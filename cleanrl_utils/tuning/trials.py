"""The tuner's study: each trial runs the script once per env id and seed as processes, `workers` trials at a time,
reports their normalised score to Optuna while they run and continues after a stop (docs/tuning.md)."""

from __future__ import annotations

import difflib
import json
import math
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, get_args

import numpy as np

from cleanrl_utils.cpu import usable_cores
from cleanrl_utils.launch.processes import log_tail
from cleanrl_utils.launch.runs import check_positive, check_script_flags, flag_value, holder, make_dir
from cleanrl_utils.script_shape import read_script
from cleanrl_utils.tuning import scores, storage
from cleanrl_utils.tuning.scores import Aggregation, Objective
from cleanrl_utils.tuning.report import fmt, log_to_wandb, print_best, print_trials, say, stored_value
from cleanrl_utils.tuning.trial_runs import Run, end_runs
from cleanrl_utils.validation import check_env_id, check_name, fail, flag_words

Direction = Literal["maximize", "minimize"]
TUNER_FLAGS = ("env-id", "seed", "run-name", "runs-dir", "resume")  # flags the tuner gives every run itself
POLL_S = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LOG_TAIL_LINES = 8
REPORTS_PER_RUN = 10  # the default report interval: a tenth of a run's steps (or of its time budget)


def trial_flags(params: dict[str, Any]) -> list[str]:
    """CleanRL's params (flag names without `--`) as command-line words; True/False as `--x`/`--no-x`."""
    return [w for k, v in params.items() if v is not None for w in flag_words(str(k).lstrip("-"), v)]


class UnknownMetric(Exception):
    """A run ended without logging the metric, which its script never names: a tag that does not exist."""


@dataclass
class ActiveTrial:
    trial: Any  # optuna.Trial
    runs: list[Run]
    started: float
    earlier_s: float  # wall time of the attempts before this one (a continued trial)
    threads: int = 1  # each run's threads
    every: float = 1.0  # the report interval
    reported: set = field(default_factory=set)

    def seconds(self) -> float:
        return self.earlier_s + time.monotonic() - self.started


@dataclass
class Tuner:
    """CleanRL's tuner (same arguments, same normalised score), running trials as processes; the fields after
    CleanRL's are the command line's flags of the same names (cleanrl_utils/tuner.py)."""

    script: str
    metric: str
    target_scores: dict[str, Optional[list[float]]]
    params_fn: Callable[[Any], dict[str, Any]]
    direction: Direction = "maximize"
    """`maximize` or `minimize` the score"""
    aggregation_type: Aggregation = "average"
    """how the envs' normalised scores combine: average, median, max or min"""
    metric_last_n_average_window: int = 50
    """a run's score: the mean of its last this many points of the metric"""
    sampler: Any = None
    pruner: Any = None
    storage: Optional[str] = None
    """an Optuna storage URL; default: SQLite in the study folder; `journal`: a journal file there (several tuner
    processes, e.g. Slurm array tasks, over a shared filesystem)"""
    study_name: str = ""
    """the study's name and folder; default: SCRIPT__ENV_IDS"""
    wandb_kwargs: Optional[dict] = None
    workers: int = 1
    """trials at a time on this machine; the cores are split between them"""
    studies_dir: str = "studies"
    """the folder of the study folders (runs, storage)"""
    objective: Objective = "score"
    """`score` (at the end of each run), `score_in_time` (reached within --time-budget seconds of each run) or
    `time_auc` (the mean score over the first --time-budget seconds)"""
    time_budget: Optional[float] = None
    """seconds of running per run, for the time objectives (each run is stopped at its budget)"""
    report_every: Optional[float] = None
    """report to the pruner every this many steps (seconds for the time objectives); default: a tenth of a run"""
    cores: Optional[int] = None
    """the cores the trials share; default: those this process may use"""

    def __post_init__(self) -> None:
        self.wandb_kwargs = self.wandb_kwargs or {}
        self.cores = self.cores or usable_cores()
        self.env_ids = list(self.target_scores) if isinstance(self.target_scores, dict) else []
        stem = os.path.splitext(os.path.basename(self.script))[0]
        self.study_name = self.study_name or "__".join([stem, *(e.replace("/", "-") for e in self.env_ids)])
        self.study_dir = os.path.join(self.studies_dir, self.study_name)
        self.runs_root = os.path.join(self.study_dir, "runs")
        self.num_trials, self.num_seeds = 1, 1  # the study's: `tune` sets them

    def check(self) -> None:
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
        for name, kind in (("aggregation_type", Aggregation), ("direction", Direction), ("objective", Objective)):
            if getattr(self, name) not in get_args(kind):  # (the command line's tyro checks them too)
                fail(f"unknown {name} {getattr(self, name)!r}; use one of {', '.join(get_args(kind))}")
        if self.objective != "score" and not (self.time_budget and self.time_budget > 0):
            fail(
                f"the objective {self.objective} needs a positive time budget (seconds per run), e.g. --time-budget 60"
            )
        counts = dict(num_trials=self.num_trials, num_seeds=self.num_seeds, workers=self.workers)
        counts.update(metric_last_n_average_window=self.metric_last_n_average_window)
        for name, value in counts.items():
            if not isinstance(value, int):
                fail(f"{name} must be a whole number, got {value}")
        check_positive(**counts, **({} if self.report_every is None else {"report_every": self.report_every}))
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
        for env_id in self.env_ids:
            try:
                check_script_flags(self.script, [*trial_flags(params), "--env-id", env_id, "--seed", "1"])
            except SystemExit as exc:
                fail(str(exc.code).removeprefix("error: ").replace("the command's flags", "the flags of params_fn"))

    def storage_url(self) -> str:
        return storage.storage_url(self.storage, self.study_dir)

    def settings(self) -> dict[str, Any]:
        """What the study's scores mean: a rerun that changes any of it needs another study."""
        names = ("script", "metric", "direction", "aggregation_type", "num_seeds", "objective", "time_budget")
        targets = {k: v and list(v) for k, v in self.target_scores.items()}
        return {
            **{n: getattr(self, n) for n in names},
            "target_scores": targets,
            "window": self.metric_last_n_average_window,
        }

    def open_study(self, num_seeds: int):
        """The study, created with its settings, or loaded (then with the same settings)."""
        import optuna

        self.num_seeds = num_seeds
        user_storage = self.storage not in (None, "", "journal")  # a bad URL fails before the study folder is made
        opened = storage.open_storage(self.storage_url()) if user_storage else None
        make_dir(self.runs_root, "the study folder")
        storage.check_writable(self.study_dir)
        settings = json.loads(json.dumps(self.settings()))
        with storage.study_lock(self.study_dir):  # tuners started together: one creates the tables, then the study
            kwargs = dict(study_name=self.study_name, storage=opened or storage.open_storage(self.storage_url()))
            try:
                study = optuna.load_study(**kwargs, sampler=self.sampler, pruner=self.pruner)
            except KeyError:
                study = optuna.create_study(
                    **kwargs, sampler=self.sampler, pruner=self.pruner, direction=self.direction, load_if_exists=True
                )
                study.set_user_attr("tuner", settings)
        stored = study.user_attrs.get("tuner")
        if stored is not None and settings != stored:
            differ = ", ".join(k for k in settings if stored.get(k) != settings[k])
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

    def next_trial(self, study):
        """Under the study's lock: dead tuners' trials queued again, and a trial started if the study needs one."""
        from optuna.trial import TrialState

        with storage.study_lock(self.study_dir):
            storage.requeue_orphans(study)
            trials = study.get_trials(deepcopy=False)
            counts = {s: sum(t.state == s for t in trials) for s in TrialState}
            taken = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] + counts[TrialState.RUNNING]
            if not counts[TrialState.WAITING] and taken >= self.num_trials:
                return None
            trial = study.ask()
            trial.set_user_attr("owner", storage.owner_id())
            if "run_key" not in trial.user_attrs:
                trial.set_user_attr("run_key", f"trial{trial.number:04d}")
            return trial

    def prepare_trial(self, trial) -> ActiveTrial:
        """The trial's runs (env ids x seeds), not started yet."""
        words = trial_flags(self.params_fn(trial))
        trial.set_user_attr("command", shlex.join(["python", self.script, *words]))
        threads = max(1, self.cores // self.workers // (self.num_seeds * len(self.env_ids)))
        thread_words, shape = [], read_script(self.script)
        for flag in ("--torch-threads", "--env-threads"):  # each run's share of the cores, where the script has it
            if shape is not None and shape.has_field(flag[2:].replace("-", "_")) and flag not in words:
                thread_words += [flag, str(threads)]
        runs, key = [], trial.user_attrs["run_key"]
        for env_id in self.env_ids:
            for seed in range(1, self.num_seeds + 1):
                name = f"{key}__{env_id.replace('/', '-')}__{seed}"
                run_words = [sys.executable, self.script, *words, *thread_words, "--env-id", env_id]
                run_words += ["--seed", str(seed), "--runs-dir", self.runs_root, "--run-name", name, "--resume", "auto"]
                run = Run(env_id, seed, name, os.path.join(self.runs_root, name), run_words)
                run.load(self.metric)
                # a run whose time budget was spent before its trial was interrupted is not started again
                run.done = bool(self.objective != "score" and run.active_seconds(math.inf) >= self.time_budget)
                runs.append(run)
        earlier = float(trial.user_attrs.get("earlier_wall_time_s", 0.0))
        resumed = f" (continues trial {trial.user_attrs['resumes']})" if "resumes" in trial.user_attrs else ""
        say(f"trial {trial.number} RUNNING{resumed}: {len(runs)} run(s), {threads} thread(s) each: {' '.join(words)}")
        every = self.report_every or self.default_report_every(words)
        return ActiveTrial(trial, runs, time.monotonic(), earlier, threads=threads, every=every)

    def start_runs(self, active: ActiveTrial) -> None:
        """Start the runs not done; one that a killed tuner's run still holds is followed, and continued once free."""
        for run in active.runs:
            if run.done:
                continue
            run.held_by = holder(run.run_dir)
            if run.held_by is None:
                run.start(active.threads)
            else:
                say(
                    f"trial {active.trial.number}: {run.name} is still running ({run.held_by}), started by an "
                    "earlier tuner: following it, and continuing it when it ends"
                )

    def trial_value(self, active: ActiveTrial, until: float = math.inf) -> Optional[float]:
        """The trial's score up to `until` (steps for the objective "score", else seconds of each run's running)."""
        values = {}
        for r in active.runs:
            times = None if self.objective == "score" else np.array([r.active_seconds(w) for w in r.follower.walls])
            scored = (self.target_scores[r.env_id], self.objective, self.metric_last_n_average_window, self.time_budget)
            values[(r.env_id, r.seed)] = scores.run_value(r.follower, times, *scored, until)
        return scores.aggregate(values, self.env_ids, self.aggregation_type)

    def default_report_every(self, words: list[str]) -> float:
        if self.objective != "score":
            return self.time_budget / REPORTS_PER_RUN
        total = flag_value(words, "--total-timesteps")
        try:
            return max(1, int(float(total) // REPORTS_PER_RUN)) if total else 10000
        except ValueError:
            return 10000

    def progress(self, run: Run) -> float:
        """How far the run has logged: its step, or for the time objectives its seconds of running."""
        if self.objective == "score":
            return run.follower.last_step
        return run.active_seconds(run.follower.last_wall) if run.follower.last_wall else 0.0

    def poll_trial(self, active: ActiveTrial) -> Optional[str]:
        """Read the runs' events, stop them at the time budget, report; the end state once the trial ends."""
        for run in active.runs:
            run.follower.poll()
            if run.held_by is not None and holder(run.run_dir) is None:  # the earlier tuner's run ended: continue it
                run.held_by = None
                run.start(active.threads)
            if run.process is not None and run.process.poll() is not None:
                run.finish()
                run.done = run.returncode == 0
                run.follower.poll()
                if not run.done:
                    end_runs(active.runs)
                    lines = log_tail(run.log_path, LOG_TAIL_LINES)
                    active.trial.set_user_attr(
                        "error", f"{run.name} exited with {run.returncode}: " + " | ".join(lines)
                    )
                    say(
                        f"trial {active.trial.number} FAILED: {run.name} exited with {run.returncode}; last lines of "
                        f"{run.log_path}:\n" + "\n".join(f"    {line}" for line in lines)
                    )
                    return "FAIL"
                self.check_metric(run)
            if (
                self.objective != "score"
                and (run.process is not None or run.held_by is not None)
                and run.active_seconds(time.time()) >= self.time_budget
            ):
                end_runs([run])
                run.done = True
        return self.report(active)

    def report(self, active: ActiveTrial) -> Optional[str]:
        """Report the score at each interval all runs have passed: PRUNED, COMPLETE once all are done, else None."""
        live = [r for r in active.runs if not r.done]
        reach = min(map(self.progress, live)) if live else max(map(self.progress, active.runs))
        point = active.every
        while point <= reach:
            if point not in active.reported:
                value = self.trial_value(active, point)
                if value is not None:
                    active.trial.report(value, int(point))
                    active.reported.add(point)
                    if active.trial.should_prune():
                        end_runs(active.runs)
                        return "PRUNED"
            point += active.every
        return "COMPLETE" if all(r.done for r in active.runs) else None

    def check_metric(self, run: Run) -> None:
        """A run ended without the metric: fine if the script names it (too short a run), else UnknownMetric."""
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
        from optuna.trial import TrialState

        trial, seconds = active.trial, active.seconds()
        trial.set_user_attr("wall_time_s", round(seconds, 1))
        value = self.trial_value(active) if state == "COMPLETE" else None
        if state == "COMPLETE" and value is None:
            trial.set_user_attr("error", "no game finished in a run: the metric has no value")
            say(f"trial {trial.number} FAILED: no game finished in a run, so {self.metric} has no value")
            state = "FAIL"
        if state == "COMPLETE":
            study.tell(trial, value)
        else:
            study.tell(trial, state=getattr(TrialState, state))
        shown = value if value is not None else (stored_value(study, trial.number) if state == "PRUNED" else None)
        if state != "FAIL":
            say(f"trial {trial.number} {state}: score {fmt(shown)} in {seconds:.1f}s")
        if self.wandb_kwargs:
            log_to_wandb(self.wandb_kwargs, trial, state, shown)
        return state

    def tune(self, num_trials: int, num_seeds: int):
        """Run the study to `num_trials` COMPLETE or PRUNED trials; returns the Optuna study."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.num_trials, self.num_seeds = num_trials, num_seeds
        self.check()
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
        # a stop is acted on between the loop's steps: a trial half taken or a run half started would be lost
        stop_requested: list[int] = []
        previous = {s: signal.signal(s, lambda signum, frame: stop_requested.append(signum)) for s in STOP_SIGNALS}
        active: list[ActiveTrial] = []
        try:
            self.run_trials(study, active, stop_requested)
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

    def run_trials(self, study, active: list[ActiveTrial], stop_requested: list[int]) -> None:
        """`workers` trials at a time until the study has its trials (KeyboardInterrupt on a stop request)."""
        failures_in_a_row = 0
        while True:
            while len(active) < self.workers and not stop_requested:
                trial = self.next_trial(study)
                if trial is None:
                    break
                active.append(self.prepare_trial(trial))
                self.start_runs(active[-1])
            if stop_requested:
                raise KeyboardInterrupt
            if not active:
                elsewhere = [t.number for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]
                if elsewhere:
                    say(f"nothing left to start here; trial(s) {', '.join(map(str, elsewhere))} run elsewhere")
                return
            time.sleep(POLL_S)
            for item in list(active):
                try:
                    state = self.poll_trial(item)
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

    def interrupt(self, study, active: list[ActiveTrial]) -> None:
        """Stop the trials' runs at their checkpoints; record them as interrupted (FAIL) for the next tuner."""
        from optuna.trial import TrialState

        end_runs([r for item in active for r in item.runs])
        for item in active:
            seconds = item.seconds()
            item.trial.set_user_attr("wall_time_s", round(seconds, 1))
            if storage.had_runs(item.trial):  # a trial stopped before its params has no runs to resume: a new one
                item.trial.set_user_attr("interrupted", True)
            study.tell(item.trial, state=TrialState.FAIL)
            say(f"trial {item.trial.number} INTERRUPTED after {seconds:.1f}s (continues on the next start)")
        active.clear()
