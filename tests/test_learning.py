"""The learning benchmark's bookkeeping (benchmark/lab/learning.py): what is finished, what resumes, the report."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from helpers import write_part

from benchmark.lab import learning
from cleanrl_utils import plot


def write_export(folder, config: str, seed: int, steps, returns, wall_seconds: float = 1000.0) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{config}__{seed}.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "wall_seconds", "return", "length"])
        for i, (s, r) in enumerate(zip(steps, returns)):
            out.writerow([s, i, r, 4 * s // 100])
    with open(os.path.join(folder, f"{config}__{seed}.json"), "w") as f:
        json.dump(
            {
                "config": config,
                "seed": seed,
                "env_id": learning.ENV_ID,
                "command": f"python x --{config}",
                "machine": "test cpu, 2 cores",
                "finished": "2026-12-03T00:00:00+00:00",
                "steps": 500_000,
                "wall_seconds": wall_seconds,
                "sps": 500_000 / wall_seconds,
                "episodes": len(steps),
            },
            f,
        )


def args_for(tmp_path, *extra: str) -> learning.Args:
    import tyro

    return tyro.cli(
        learning.Args,
        args=[
            "report",
            "--results-dir",
            str(tmp_path / "results"),
            "--report-path",
            str(tmp_path / "results.md"),
            *extra,
        ],
    )


def test_report_table_verdicts_and_what_is_missing(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "quick"
    steps = np.arange(1, 501) * 1000  # one game ending every 1k steps
    # sync: return = window index + 1 (1 in 0-100k, ..., 5 in 400-500k); seed 2 is 1 higher everywhere
    sync1 = (steps - 1) // 100_000 + 1
    write_export(folder, "sync", 1, steps, sync1)
    write_export(folder, "sync", 2, steps, sync1 + 1)
    write_export(folder, "ale", 1, steps, sync1 + 0.5)  # between the two sync seeds: within noise
    write_export(folder, "ale", 2, steps, sync1 + 0.6)
    write_export(folder, "envpool", 1, steps, sync1 * 0 + 0.5)  # never learns: far outside, but one seed only
    args = args_for(tmp_path)
    assert learning.report(args) == 0
    text = (tmp_path / "results.md").read_text()
    assert "| sync | 1 | 1.00 | 2.00 | 3.00 | 4.00 | 5.00 |" in text
    assert "| **sync, mean** | 2 seeds | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "| ale | 1 | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "2.03 | 3.60 | 7.81 | 11.13 | 12.44" in text  # CleanRL's anchor row
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    # seeds are the unit: last-200k means sync 4.5, 5.5; ale 5.0, 5.1; envpool 0.5. Seed-to-seed std pooled over
    # sync and ale: sqrt((0.5 + 0.005) / 2) = 0.5025 (2 degrees of freedom)
    assert "within seed noise" in verdicts["ale"] and "NOT" not in verdicts["ale"]
    assert (
        "difference of the means +0.05, tolerance 1.00 = 2 standard errors from the seed-to-seed std 0.50 (2 "
        "degrees of freedom)" in verdicts["ale"]
    )
    # one seed is judged against the pooled spread: 2 x 0.5025 x sqrt(1 + 1/2) = 1.23; and a run that never learns
    # fails whatever the spread: its last 200k steps are not above its first window by 2 x 0.5025
    assert verdicts["envpool"].startswith(
        "- **envpool**: FAILS: seed 1 stalled (last 200k steps 0.50, first window "
        "0.50); last 200k steps, per seed 0.50 vs sync 4.50, 5.50; difference of the "
        "means -4.50, tolerance 1.23"
    )
    assert verdicts["sync"].endswith("the reference")
    assert "Not finished yet: multigpu_2ranks seed 1, sync_1env seed 1, envpool seed 2." in text
    assert (tmp_path / "results" / "quick_curves.png").stat().st_size > 10_000
    # a rebuild replaces the generated part and keeps what a person wrote around it
    (tmp_path / "results.md").write_text("intro by hand\n" + text + "\nnotes by hand\n")
    write_export(folder, "envpool", 2, steps, sync1 * 0 + 0.6)
    assert learning.report(args) == 0
    again = (tmp_path / "results.md").read_text()
    assert again.startswith("intro by hand\n") and again.endswith("\nnotes by hand\n")
    assert (
        again.count(learning.GENERATED_START) == 1
        and "Not finished yet: multigpu_2ranks seed 1, sync_1env seed 1." in again
    )
    assert "- **envpool**: FAILS: seed 1 stalled" in again and "seed 2 stalled" in again
    assert "seed-to-seed std 0.41 (3 degrees of freedom)" in again  # envpool's 2 seeds join the pooled spread


def test_verdicts_wait_for_a_spread_and_leave_the_baseline_out(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "quick"
    steps = np.arange(1, 501) * 1000
    write_export(folder, "sync", 1, steps, np.full(500, 4.0))
    write_export(folder, "ale", 1, steps, np.full(500, 9.0))
    write_export(folder, "sync_1env", 1, steps, np.full(500, 1.0))
    write_export(folder, "sync_1env", 2, steps, np.full(500, 7.0))  # its spread is not the 8-env game's
    assert learning.report(args_for(tmp_path)) == 0
    text = (tmp_path / "results.md").read_text()
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    assert "undecided until some configuration has 2 seeds" in verdicts["ale"]
    assert "per seed 9.00 vs sync 4.00" in verdicts["ale"]
    assert "not a backend" in verdicts["sync_1env"]


def test_a_stalled_seed_does_not_widen_the_rule_that_catches_stalls(tmp_path):
    # envpool: one seed stalled, one learnt a lot, so the pooled seed-to-seed std is large (sqrt((0.02 + 84.5) / 2) =
    # 6.5); multigpu_2ranks learnt as sync did (1 -> 4.5). The stall rule's scale is sync's own seeds (std 0.14), so
    # the stalled seed fails and the run that learnt does not (on the pooled std, 3.5 < 2 x 6.5 called it stalled)
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "quick"
    steps = np.arange(1, 501) * 1000
    rising = (steps - 1) // 100_000 + 1.0  # window means 1, 2, 3, 4, 5
    write_export(folder, "sync", 1, steps, rising)
    write_export(folder, "sync", 2, steps, rising + 0.2)
    write_export(folder, "envpool", 1, steps, np.full(500, 0.5))
    write_export(folder, "envpool", 2, steps, rising * 3)
    write_export(folder, "multigpu_2ranks", 1, steps, rising)
    assert learning.report(args_for(tmp_path)) == 0
    text = (tmp_path / "results.md").read_text()
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    assert (
        verdicts["envpool"].startswith("- **envpool**: FAILS: seed 1 stalled") and "seed 2" not in verdicts["envpool"]
    )
    assert "within seed noise of sync" in verdicts["multigpu_2ranks"] and "FAILS" not in verdicts["multigpu_2ranks"]
    assert "seed-to-seed std 6.50 (2 degrees of freedom)" in verdicts["multigpu_2ranks"]  # the means' tolerance


def test_bf16_profile_judges_against_float32_and_fails_a_regressed_run(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "bf16"
    steps = np.arange(1, 501) * 1000
    rising = np.repeat(np.arange(1.0, 6.0), 100)  # window means 1, 2, 3, 4, 5
    write_export(folder, "envpool", 1, steps, rising)
    write_export(folder, "envpool", 2, steps, rising + 1)
    write_export(folder, "envpool_bf16", 1, steps, rising + 0.5)
    write_export(folder, "envpool_bf16", 2, steps, np.repeat([1.0, 6.0, 9.0, 9.0, 2.0], 100))  # learnt, then lost it
    args = args_for(tmp_path, "--profile", "bf16")
    assert learning.report(args) == 0
    text = (tmp_path / "results.md").read_text()
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    assert verdicts["envpool"].endswith("the reference")
    assert verdicts["envpool_bf16"].startswith(
        "- **envpool_bf16**: FAILS: seed 2 regressed (last window 2.00, best earlier 9.00)"
    )
    assert "vs envpool 4.50, 5.50" in verdicts["envpool_bf16"]
    write_export(folder, "envpool_bf16", 2, steps, rising + 0.7)
    assert learning.report(args) == 0
    verdicts = {
        line.split("**")[1]: line
        for line in (tmp_path / "results.md").read_text().splitlines()
        if line.startswith("- **")
    }
    assert verdicts["envpool_bf16"].startswith(
        "- **envpool_bf16**: within seed noise of envpool: last 200k steps, per seed 5.00, 5.20 vs envpool 4.50, 5.50"
    )


def test_plan_and_commands_resume_a_cut_run(tmp_path):
    import tyro

    args = tyro.cli(learning.Args, args=["run", "--runs-dir", str(tmp_path / "runs"), "--only", "sync"])
    planned = learning.plan(args)
    assert [(p.config.name, p.seed) for p in planned] == [("sync", 1), ("sync", 2)]
    cmd = planned[0].command(args, resume=False)
    assert cmd[:2] == ["python", "cleanrl/ppo_atari.py"] and "--resume" not in cmd
    for flag, value in (
        ("--total-timesteps", "500000"),
        ("--seed", "1"),
        ("--vector-env", "sync"),
        ("--run-name", planned[0].run_name),
        ("--runs-dir", str(tmp_path / "runs")),
    ):
        assert cmd[cmd.index(flag) + 1] == value
    assert planned[0].command(args, resume=True)[-1] == "--resume"
    two = [p for p in learning.plan(learning.Args("run")) if p.config.name == "multigpu_2ranks"][0]
    cmd = two.command(args, resume=False)
    assert cmd[:4] == ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2"]
    assert cmd[cmd.index("--num-envs") + 1] == "8"  # the same global batch as the single-process runs


def test_unknown_config_is_a_one_line_error(tmp_path):
    from helpers import assert_one_line_error, run_script

    result = run_script(["-m", "benchmark.lab.learning", "run", "--only", "syncc"], cwd=tmp_path, timeout=300)
    assert_one_line_error(result, "unknown config(s) syncc")


TINY_PROFILE = """
import sys
from benchmark.lab import learning as L
flags = ("--vector-env", "sync", "--num-envs", "4", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1")
L.PROFILES["quick"] = {"env_ids": [L.ENV_ID], "total_timesteps": 2048,
                       "configs": [L.Config("sync", tuple(L.SINGLE), flags, (1,))]}
sys.exit(L.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_stopped_benchmark_resumes_its_cut_run_and_exports_it(tmp_path):
    """The benchmark stopped (SIGTERM, as a scheduler does) mid-run keeps the run's checkpoint; started again it
    resumes that run, which ends with one continuous log, and exports it."""
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO_ROOT, read_scalars

    (tmp_path / "cleanrl").symlink_to(REPO_ROOT / "cleanrl")
    argv = [
        sys.executable,
        "-c",
        TINY_PROFILE,
        "run",
        "--runs-dir",
        "runs",
        "--results-dir",
        "results",
        "--checkpoint-interval",
        "1",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "runs" / f"{learning.ENV_ID}__sync__1__0"
    deadline = time.time() + 300
    while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 130, err[-2000:]
    assert "starting" in out and "keeps its checkpoint" in err
    assert not (tmp_path / "results" / "quick" / "sync__1.json").exists()
    cut = [s for s, _ in read_scalars(run_dir, "losses/value_loss")]
    assert 0 < len(cut) < 8

    second = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming" in second.stdout and "--resume" in second.stdout
    assert [s for s, _ in read_scalars(run_dir, "losses/value_loss")] == list(range(256, 2049, 256))
    meta = json.loads((tmp_path / "results" / "quick" / "sync__1.json").read_text())
    assert meta["steps"] == 2048 and meta["episodes"] >= 1 and "--resume" not in meta["command"]
    # a third start finds it finished and runs nothing
    third = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and "finished" in third.stdout and "starting" not in third.stdout


# ---------------------------------------------------------------- the full-length profile (full-cpu)

BREAKOUT, PONG = "BreakoutNoFrameskip-v4", "PongNoFrameskip-v4"
LAST_STEP = 9_999_360  # 10M steps in whole batches of 1,024


def long_curve(shape: str, game: str = BREAKOUT, end: int = LAST_STEP) -> tuple[np.ndarray, np.ndarray]:
    """A game ending every 2,560 steps up to `end`, its return drawn around a curve of the given shape."""
    steps = np.arange(2560, end + 1, 2560)
    rng = np.random.default_rng(0)
    x = steps / 10_000_000
    # Pong: -21 to about 20.5 ("above": to 21.9 before the cap of 21); a game's score varies by about 1 late in a run
    if game == PONG:
        level = -21 + (43 if shape == "above" else 41.5) * (1 - np.exp(-6 * x))
        return steps, np.clip(level + rng.normal(0, 1, len(x)), -21, 21).round()
    level = {
        "good": 420 * (1 - np.exp(-5 * x)),  # CleanRL's shape: climbing, flattening out near 420
        "stalled": np.full(len(x), 2.0),
        "collapsing": np.where(x < 0.5, 840 * x, 420 - 1500 * (x - 0.5)).clip(5),
        "dip": np.where((x > 0.6) & (x <= 0.7), 200, 420 * (1 - np.exp(-5 * x))),
    }[shape]
    return steps, np.maximum(level + rng.normal(0, 0.2 * level + 1), 0).round()


def write_long_export(
    folder, steps, returns, game: str = BREAKOUT, partial: bool = False, config: str = "envpool"
) -> str:
    """An export as `export` writes it: the finished plain files, or the `.partial` ones of a run in progress."""
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(
        folder,
        ("" if game == BREAKOUT else game.split("NoFrameskip")[0] + "_")
        + f"{config}__1"
        + (".partial" if partial else ""),
    )
    seconds = steps / 300.0  # 300 SPS
    with open(base + ".csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "wall_seconds", "return", "length"])
        out.writerows([int(s), f"{t:.1f}", r, 4000] for s, t, r in zip(steps, seconds, returns))
    parts = [
        {
            "started": "2026-12-05T00:00:00+00:00",
            "ended": "2026-12-05T02:00:00+00:00",
            "seconds": 7200.0,
            "resumed": False,
            "machine": "test cpu, 2 cores",
            "returncode": 0,
            "logged": True,
            "steps_from": 0,
            "steps_to": int(steps[-1]) // 2,
            "training_seconds": 7190.0,
            "sps": 300.0,
        },
        {
            "started": "2026-12-06T00:00:00+00:00",
            "ended": None,
            "seconds": None,
            "resumed": True,
            "machine": "test cpu, 2 cores",
            "returncode": None,
            "logged": False,
            "running": partial,
            "steps_from": int(steps[-1]) // 2,
            "steps_to": int(steps[-1]),
            "training_seconds": 7190.0,
            "sps": 150.0,
        },
    ]
    with open(base + ".json", "w") as f:
        json.dump(
            {
                "config": config,
                "seed": 1,
                "env_id": game,
                "command": "python cleanrl/ppo_atari.py",
                "machine": "test cpu, 2 cores",
                "length_unit": "frames",
                "commit": "0123456789abcdef" * 2 + "01234567",
                "commit_modified": False,
                "total_timesteps": 10_000_000,
                "steps": int(steps[-1]),
                "complete": not partial,
                "wall_seconds": float(seconds[-1]),
                "elapsed_seconds": 90_000.0,
                "sps": 300.0,
                "top_sps": 310.0,
                "episodes": len(steps),
                "resumes": 1,
                "parts": parts,
                "exported": "2026-12-06T02:00:00+00:00",
            },
            f,
        )
    return base


def long_args(tmp_path, *extra: str):
    import tyro

    return tyro.cli(
        learning.Args,
        args=[
            "report",
            "--profile",
            "full-cpu",
            "--results-dir",
            str(tmp_path / "results"),
            "--report-path",
            str(tmp_path / "results_10m.md"),
            "--readme-path",
            str(tmp_path / "README.md"),
            *extra,
        ],
    )


def verdict_of(tmp_path, shape: str, game: str = BREAKOUT, end: int = LAST_STEP, partial: bool = False) -> str:
    write_long_export(tmp_path / "results" / "full-cpu", *long_curve(shape, game, end), game=game, partial=partial)
    (run,) = learning.load_exports(long_args(tmp_path))
    return learning.long_verdict(run, 10_000_000)


def test_full_length_rule_passes_a_good_curve_and_fails_a_stalled_or_collapsing_one(tmp_path):
    assert verdict_of(tmp_path / "good", "good").startswith("PASS: the mean of the last 100 games is 4")
    assert verdict_of(tmp_path / "pong", "good", PONG).startswith("PASS")
    stalled = verdict_of(tmp_path / "stalled", "stalled")
    assert stalled.startswith("FAIL: the mean of the last 100 games is 2.")
    assert "below CleanRL's band (under the bound 358.48)" in stalled
    assert "window" not in stalled  # flat is not a fall: only the level fails
    collapsing = verdict_of(tmp_path / "collapsing", "collapsing")
    assert collapsing.startswith("FAIL: the mean of the last 100 games") and "window 6-7M: mean" in collapsing
    # fell apart and recovered: the level passes, the windows do not
    dip = verdict_of(tmp_path / "dip", "dip")
    assert dip.startswith("FAIL: window 6-7M: mean 19") and "below the best earlier window's" in dip
    assert "window 7-8M" not in dip
    # a run short of its last step is never judged, however good its curve
    assert verdict_of(tmp_path / "partial", "good", end=3_000_320, partial=True) == "not finished (3,000,320 steps)"
    assert verdict_of(tmp_path / "cut", "good", end=LAST_STEP - 1024, partial=True).startswith("not finished")


def test_window_checks_use_the_larger_of_the_games_noise_and_cleanrls_spread(tmp_path):
    write_long_export(tmp_path / "results" / "full-cpu", *long_curve("good"))
    (run,) = learning.load_exports(long_args(tmp_path))
    checks = learning.window_checks(run, 10_000_000)
    assert [c.label for c in checks] == [f"{k}-{k + 1}M" for k in range(10)]
    assert checks[0].best is None and checks[0].ok
    late = checks[-1]
    assert late.best == max(c.mean for c in checks[:-1])
    assert late.tolerance == pytest.approx(max(2 * np.hypot(late.se, checks[-2].se), 2 * 28.09))
    games = run.returns[(run.steps > 9_000_000) & (run.steps <= 10_000_000)]
    assert late.games == len(games) and late.se == pytest.approx(games.std(ddof=1) / np.sqrt(len(games)))


def test_one_more_seed_is_what_three_normal_seeds_give_a_fourth():
    # simulated: 3 seeds and one more, all from one normal distribution; the band and range scale with the seeds' spread
    inside, lo, hi = learning.one_more_seed(PONG)
    mean, std = learning.CLEANRL_10M[PONG]
    seeds = np.random.default_rng(0).normal(size=(400_000, 4))
    distance = np.abs(seeds[:, 3] - seeds[:, :3].mean(axis=1)) / seeds[:, :3].std(axis=1)  # ddof=0, as published
    assert np.mean(distance < 2) == pytest.approx(inside, abs=0.005) and 0.6 < inside < 0.8
    assert hi - mean == pytest.approx(mean - lo)
    assert np.mean(distance < (hi - mean) / std) == pytest.approx(0.95, abs=0.003)


def test_a_finished_run_outside_the_band_fails_and_says_what_bears_on_why(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "full-cpu"
    write_long_export(folder, *long_curve("good"))
    write_long_export(folder, *long_curve("above", PONG), game=PONG)
    # a lost run of the same seed: the same first 50 games, then its own, exported to 5M steps
    steps, returns = long_curve("above", PONG, end=5_002_240)
    returns[50:] = np.where(returns[50:] > -21, returns[50:] - 1, -20)
    write_long_export(folder / learning.LOST, steps, returns, game=PONG, partial=True)
    assert learning.report(long_args(tmp_path)) == 0
    text = (tmp_path / "results_10m.md").read_text()
    pong = text[text.index(f"### {PONG}, envpool, seed 1:") : text.index("## Runs and their parts")]
    (run,) = [r for r in learning.load_exports(long_args(tmp_path)) if r.env_id == PONG]
    last = run.returns[-100:].mean()
    # judged by the one-sided level as every game; the two-sided verdict Pong's run was first judged by, named once
    assert last > 20.76 and pong.startswith(f"### {PONG}, envpool, seed 1: PASS: the mean of the last 100 games")
    assert pong.count("First judged under the two-sided level") == 1 and f"{last:.2f}, above CleanRL's band" in pong
    assert "**Outside CleanRL's band (above it): what bears on why.**" in pong
    assert (
        "with probability 71% (Student's t, 2 degrees of freedom), and 95% of such seeds in 19.14..21.58 (no game "
        f"scores above 21): this run's {last:.2f} is inside that range." in pong
    )
    assert "`ppo_atari_envpool.py` 20.45 ± 0.09, `ppo_atari_multigpu.py` 20.34 ± 0.43" in pong
    assert f"average {21 - last:.2f} below the game's top score of 21; CleanRL's seeds, 0.64." in pong
    lost = f"Another run of this seed: `{folder / learning.LOST}/Pong_envpool__1.partial.csv`, the same commit on test"
    assert lost in pong and "match this run's for the first 50, then part, so it is" in pong
    there, here = returns[steps <= 5_002_240][-100:].mean(), run.returns[run.steps <= 5_002_240][-100:].mean()
    assert (
        f"As far as both reached (5,002,240 steps), the mean of the last 100 games: {there:.2f} there, "
        f"{here:.2f} here" in pong
    )
    windows = pong[pong.index("there / here: ") :].split(".\n")[0]
    assert windows.count("M ") == 5 and "; 4-5M " in windows  # the whole windows both reached
    # the lost run is no run of the report's own: no verdict, no row
    assert text.count("Pong_envpool__1.partial.csv") == 1
    # Breakout, inside its band, gets no such paragraph
    assert text.count("Outside CleanRL's band") == 1


def test_full_length_report_states_the_rule_first_and_labels_a_partial_run(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "full-cpu"
    write_long_export(folder, *long_curve("good"))
    write_long_export(folder, *long_curve("good", PONG, end=1_500_160), game=PONG, partial=True)
    assert learning.report(long_args(tmp_path)) == 0
    text = (tmp_path / "results_10m.md").read_text()
    assert text.startswith("# CleanRL's benchmark at full length")
    rule, results = text.index("## The verdict rule"), text.index("## Where the runs are")
    assert rule < results and "414.66 - 2 x 28.09 = 358.48" in text[rule:results]
    assert "1915.93 - 2 x 484.58 = 946.77" in text[rule:results] and "19.96..20.76" in text[rule:results]
    assert (
        f"| {BREAKOUT} | envpool, seed 1 | `{folder}/envpool__1.csv` | 9,999,360 of 10,000,000 (100.0%) | PASS" in text
    )
    assert (
        f"| {PONG} | envpool, seed 1 | `{folder}/Pong_envpool__1.partial.csv` | 1,500,160 of 10,000,000 (15.0%) | "
        "not finished (1,500,160 steps) |" in text
    )
    assert f"### {PONG}, envpool, seed 1 (partial: 1,500,160 steps): not finished (1,500,160 steps)" in text
    pong = text[text.index(f"### {PONG}, envpool") : text.index("## Runs and their parts")]
    assert "| 1-2M (to 1,500,160 so far) | 196 |" in pong and "2-3M" not in pong  # the windows it reached
    breakout = text[text.index(f"### {BREAKOUT}, envpool") : text.index(f"## {PONG}")]
    assert "| 9-10M | " in breakout and "so far" not in breakout  # a finished run's last window is whole
    # a finished run's wall hours, then what its top speed (the machine alone) needs for all its steps
    assert (
        "steps (300 SPS); at its top speed (310 SPS), the machine alone, about 8.96 h; at the mean speed of its "
        "parts not marked shared (300 SPS over 2.00 h of training), 9.26 h." in breakout
    )
    assert "(the run has not finished: for orientation only)" in text
    # times to a return: the first game at which the mean of the last 20 reaches it; Pong's 18 not yet
    run = next(r for r in learning.load_exports(long_args(tmp_path)) if r.env_id == BREAKOUT)
    step, seconds = learning.first_reach(run, 100)
    assert np.mean(run.returns[run.steps <= step][-20:]) >= 100 > np.mean(run.returns[run.steps < step][-20:])
    assert f"| 100 | {seconds / 3600:.2f} h | {step / 310 / 3600:.2f} h | — |" in text  # the alone: steps / top SPS
    assert "| 18 | not reached yet | — | — |" in text
    assert "| 0123456 |" in text and "test cpu, 2 cores" in text
    # the second part ran at half the top speed: shared
    assert (
        f"| {PONG} | envpool | 2 | 2026-12-06T00:00:00 | test cpu | 2.00 h | 750,080 to 1,500,160 | 150 | 48% | shared, running "
        "when exported |" in text
    )
    assert f"Shared so far: {BREAKOUT} envpool part 2, {PONG} envpool part 2." in text
    assert (tmp_path / "results" / "full-cpu_curves.png").stat().st_size > 10_000
    # a finished export supersedes its partial one; the quick report's loader never sees a partial
    write_long_export(folder, *long_curve("good", PONG), game=PONG)
    assert {(r.env_id, r.partial) for r in learning.load_exports(long_args(tmp_path))} == {
        (BREAKOUT, False),
        (PONG, False),
    }
    os.remove(folder / "Pong_envpool__1.json")
    assert [r.env_id for r in learning.load_finished(long_args(tmp_path))] == [BREAKOUT]


BEAMRIDER = "BeamRiderNoFrameskip-v4"


def test_the_level_is_one_sided_above_the_band_passes_and_says_above(tmp_path):
    assert learning.level_check(BREAKOUT, 480.0) == (True, "480.00, above CleanRL's band (at least the bound 358.48)")
    assert (
        learning.level_check(BREAKOUT, 360.0)[0] and "inside CleanRL's band" in learning.level_check(BREAKOUT, 360)[1]
    )
    assert learning.level_check(BREAKOUT, 358.0) == (False, "358.00, below CleanRL's band (under the bound 358.48)")
    assert learning.level_check(BEAMRIDER, 946.8)[0] and not learning.level_check(BEAMRIDER, 946.7)[0]
    assert learning.level_check(PONG, 20.98)[0]  # above the band: passes, as every game
    assert not learning.level_check(PONG, 20.98, two_sided=True)[0]  # the two-sided level Pong was first judged by
    # a whole run above the band: PASS, and the verdict says "above"
    steps, returns = long_curve("good")
    write_long_export(tmp_path / "results" / "full-cpu", steps, returns * 1.25)
    (run,) = learning.load_exports(long_args(tmp_path))
    verdict = learning.long_verdict(run, 10_000_000)
    assert verdict.startswith("PASS: the mean of the last 100 games is 5") and "above CleanRL's band" in verdict


def two_breakout_runs(tmp_path, bf16_shift: float, bf16_partial: bool = False):
    folder = tmp_path / "results" / "full-cpu"
    steps, returns = long_curve("good")
    write_long_export(folder, steps, returns)
    end = int(np.searchsorted(steps, 3_000_320, side="right")) if bf16_partial else len(steps)
    write_long_export(folder, steps[:end], returns[:end] + bf16_shift, partial=bf16_partial, config="envpool_bf16")
    return folder, sorted(learning.load_exports(long_args(tmp_path)), key=lambda r: r.config)


def test_bf16_is_level_with_float32_within_two_of_cleanrls_seed_deviations(tmp_path):
    _, game = two_breakout_runs(tmp_path / "near", 50.0)
    (line,) = [x for x in learning.bf16_lines(game, 10_000_000) if x]
    assert "**bf16 against float32" in line and "level: " in line and "a difference of +50.00" in line
    assert "against 2 of CleanRL's seed standard deviations, 56.18" in line
    # the windows side by side, bf16 first; the games part from the first (every return shifted by 50)
    f32, bf16 = game
    window = (f32.steps > 3_000_000) & (f32.steps <= 4_000_000)
    means = f"{bf16.returns[window].mean():.2f} / {f32.returns[window].mean():.2f}"
    assert f"; 3-4M {means}; " in line and "their games part after the first 0 " in line
    _, game = two_breakout_runs(tmp_path / "far", -60.0)
    (line,) = [x for x in learning.bf16_lines(game, 10_000_000) if x]
    assert "not level (bf16 lower): " in line and "a difference of -60.00" in line


def test_the_readme_says_both_verdicts_and_the_hours_alone_from_top_speed_to_unshared_mean(tmp_path):
    pytest.importorskip("matplotlib")
    folder, (f32, bf16) = two_breakout_runs(tmp_path, -20.0)
    assert learning.processor("Intel(R) Xeon(R) Processor, 2 cores") == "Intel Xeon"
    assert learning.processor("AMD EPYC, 2 cores") == "AMD EPYC"
    # part 1 ran alone at 300 SPS for 7,190 s, part 2 at 150 (shared: under 85% of the top speed, 310)
    assert learning.shared_parts(f32) == [False, True] and learning.alone_speed(f32) == (300.0, 7190.0)
    span = f"{10_000_000 / 310 / 3600:.2f}-{10_000_000 / 300 / 3600:.2f} h (test cpu)"
    assert learning.alone_hours(f32, 10_000_000) == span
    (tmp_path / "README.md").write_text(f"intro\n{learning.README_START}\nold\n{learning.README_END}\nafter\n")
    assert learning.report(long_args(tmp_path)) == 0
    readme = (tmp_path / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| Breakout |"))
    assert row.endswith(f"| PASS; bf16 PASS, level with float32 | {span}; bf16 {span} |")
    means = [f"{r.returns[-100:].mean():.2f}" for r in (f32, bf16)]
    advice, said = readme.split("| BeamRider |")[1].split("\n\n")[1:3]
    assert "it learns level with float32 on Breakout, and is not yet run on Pong and BeamRider: keep float32" in advice
    assert said.startswith(
        f"At 10M steps on 2 CPU cores: Breakout passes ({means[0]}), and with `--bf16` passes too ({means[1]}, level "
        "with float32); Pong has not started; BeamRider has not started. CleanRL's own runs took 4.40 h each"
    )
    text = (tmp_path / "results_10m.md").read_text()
    assert "at the mean speed of its parts not marked shared (300 SPS over 2.00 h of training), " in text


def test_time_to_a_score_per_run_as_it_went_and_alone_with_shared_parts_marked(tmp_path):
    pytest.importorskip("matplotlib")
    folder, (f32, bf16) = two_breakout_runs(tmp_path, 0.0, bf16_partial=True)
    (tmp_path / "README.md").write_text(f"intro\n{learning.README_START}\nold\n{learning.README_END}\nafter\n")
    assert learning.report(long_args(tmp_path)) == 0
    text = (tmp_path / "results_10m.md").read_text()
    table = text[text.index(f"#### {BREAKOUT}: time to a score") : text.index("**bf16 against float32")]
    assert "envpool_bf16, seed 1 (partial: 3,000,320 steps): as the run went" in table
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    (s100, t100), (s400, t400) = learning.first_reach(f32, 100), learning.first_reach(f32, 400)
    assert s100 < s400 < 5_000_000  # part 2 (half the top speed: shared) starts at 5M
    assert rows["| 100"].startswith(f"| 100 | {t100 / 3600:.2f} h | {s100 / 310 / 3600:.2f} h |")
    assert rows["| 400"].startswith(f"| 400 | {t400 / 3600:.2f} h | {s400 / 310 / 3600:.2f} h |")
    assert rows["| 400"].endswith("| not reached yet | — | — |")  # the partial bf16 run
    wall = f32.meta["wall_seconds"] / 3600  # the whole run: its shared part 2 included, and marked
    assert rows["| all 10,000,000 steps"] == (
        f"| all 10,000,000 steps | {wall:.2f} h (shared parts) | {10_000_000 / 310 / 3600:.2f} h | not reached yet "
        f"| {10_000_000 / 310 / 3600:.2f} h at the top speed (projected) | 4.40 h (1 GPU, 10 CPUs) |"
    )
    assert "Top speed: envpool: 310 SPS on test cpu, 2 cores" in table
    # every game and precision in one table: hours alone to CleanRL's mean - 2 std and to its mean
    summary = text[text.index("## Time to CleanRL's score") : text.index("![return vs steps")]
    rows = [line for line in summary.splitlines() if line.startswith("| Breakout |")]
    s_bound, s_mean = (learning.first_reach(f32, level)[0] for level in (358.48, 414.66))
    top_to_alone = [f"{s / 310 / 3600:.2f}-{s / 300 / 3600:.2f} h" for s in (s_bound, s_mean, 10_000_000)]
    assert rows[0] == (
        f"| Breakout | envpool, seed 1 | test cpu | 358.48: {top_to_alone[0]} | 414.66: {top_to_alone[1]} | "
        f"{top_to_alone[2]} |"
    )
    assert rows[1].startswith("| Breakout | envpool_bf16, seed 1 (partial: 3,000,320 steps) | test cpu |")
    assert rows[1].endswith("(projected) |") and "414.66: not reached yet" in rows[1]
    # the README's table comes from the same figures; the partial run is labelled and gets no verdict
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith(f"intro\n{learning.README_START}\n| game |") and readme.endswith(
        f"{learning.README_END}\nafter\n"
    )
    row = next(line for line in readme.splitlines() if line.startswith("| Breakout |"))
    assert f"| 414.66 ± 28.09 | {f32.returns[-100:].mean():.2f} | " in row and "(partial, 3.0M steps) | PASS |" in row
    assert "| BeamRider | 1915.93 ± 484.58 | not started |" in readme


def test_a_partial_run_gets_no_verdict_anywhere(tmp_path):
    pytest.importorskip("matplotlib")
    _, (_, bf16) = two_breakout_runs(tmp_path, 100.0, bf16_partial=True)
    assert learning.long_verdict(bf16, 10_000_000) == "not finished (3,000,320 steps)"
    (line,) = [x for x in learning.bf16_lines([*learning.load_exports(long_args(tmp_path))], 10_000_000) if x]
    assert "no verdict until both runs have finished" in line and "level:" not in line
    assert learning.report(long_args(tmp_path)) == 0
    text = (tmp_path / "results_10m.md").read_text()
    assert "envpool_bf16, seed 1 (partial: 3,000,320 steps): not finished (3,000,320 steps)" in text
    assert "| envpool_bf16, seed 1 | `" in text and "| not finished (3,000,320 steps) |" in text
    assert "PASS" not in text[text.index("### " + BREAKOUT + ", envpool_bf16") : text.index("#### " + BREAKOUT)]


def test_export_writes_a_run_in_progress_with_its_parts_and_then_the_finished_run(tmp_path):
    import datetime
    import subprocess
    import time

    import tyro

    checkout = tmp_path / "code"
    checkout.mkdir()
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (checkout / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    run_dir = tmp_path / "runs" / f"{BREAKOUT}__envpool__1__0"
    run_dir.mkdir(parents=True)
    t0 = time.time() - 10_200  # part 2 started 10,000 s later: 200 s ago
    write_part(run_dir, t0, range(1, 51))  # part 1: iterations 1-50; its checkpoint was at 40 (it crashed)
    iso = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")  # noqa
    (run_dir / "parts.jsonl").write_text(
        json.dumps(
            {
                "started": iso(t0 - 1),
                "resumed": False,
                "machine": "test cpu, 2 cores",
                "ended": iso(t0 + 101),
                "seconds": 102.0,
                "returncode": 1,
            }
        )
        + "\n"
    )
    write_part(run_dir, t0 + 10_000, range(41, 81), purge_step=40 * 1024 + 1)  # part 2, a day later; no line yet

    argv = [
        "export",
        "--profile",
        "full-cpu",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--results-dir",
        str(tmp_path / "results"),
        "--checkout",
        str(checkout),
    ]
    assert learning.export_runs(tyro.cli(learning.Args, args=argv)) == 0
    base = tmp_path / "results" / "full-cpu" / "envpool__1"
    meta = json.loads(base.with_suffix(".partial.json").read_text())
    assert not base.with_suffix(".json").exists() and base.with_suffix(".partial.csv").exists()
    assert meta["commit"] == head and meta["commit_modified"] is False
    assert meta["steps"] == 80 * 1024 and meta["complete"] is False and meta["total_timesteps"] == 10_000_000
    assert meta["episodes"] == 80 and meta["resumes"] == 1  # part 2 logged no line: its machine is this one
    assert meta["machine"] == f"test cpu, 2 cores, {learning.machine()}"
    assert "--runs-dir runs/learning" in meta["command"] and str(tmp_path) not in meta["command"]
    # wall seconds leave the day between the parts out (and the 10 iterations part 2 did again)
    assert meta["elapsed_seconds"] > 10_000 and meta["wall_seconds"] == pytest.approx(80 + 80, abs=3)
    first, second = meta["parts"]
    assert first["logged"] and first["returncode"] == 1 and (first["steps_from"], first["steps_to"]) == (0, 40_960)
    assert not second["logged"] and second["resumed"] and second["ended"] is None and second["running"]
    assert (second["steps_from"], second["steps_to"]) == (40_960, 81_920)
    assert second["sps"] == pytest.approx(40 * 1024 / 80, rel=0.03) and meta["top_sps"] == pytest.approx(512, rel=0.01)
    rows = np.loadtxt(base.with_suffix(".partial.csv"), delimiter=",", skiprows=1)
    assert rows[-1, 0] == 81_920 and rows[-1, 1] == pytest.approx(160, abs=3)  # the game's time without pauses
    assert (
        learning.load_finished(learning.Args("report", profile="full-cpu", results_dir=str(tmp_path / "results"))) == []
    )

    write_part(run_dir, t0 + 10_150, [9765])  # the last iteration: the run is finished
    assert learning.export_runs(tyro.cli(learning.Args, args=argv)) == 0
    assert json.loads(base.with_suffix(".json").read_text())["complete"] is True
    assert not base.with_suffix(".partial.json").exists() and not base.with_suffix(".partial.csv").exists()


def test_export_without_a_run_is_a_one_line_error(tmp_path):
    from helpers import assert_one_line_error, run_script

    (tmp_path / "runs").mkdir()
    result = run_script(
        [
            "-m",
            "benchmark.lab.learning",
            "export",
            "--profile",
            "full-cpu",
            "--runs-dir",
            "runs",
            "--checkout",
            str(tmp_path),
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert_one_line_error(result, "is not a git checkout")


def test_a_runs_top_speed_is_its_fastest_part_of_ten_minutes_not_a_burst():
    """Minutes drift by up to 1.8x: a short fast stretch or part must not make a long part that ran alone look
    shared. Part 1: 20 min at 500 SPS with a 1-minute burst at 700; part 2: 5 min at 650; part 3: 20 min at 250."""
    times, steps, t, n = [], [], 0.0, 0
    for seconds, sps in [(570, 500), (60, 700), (570, 500), (300, 650), (1200, 250)]:
        for _ in range(int(seconds // 2)):
            t, n = t + 2, n + 2 * sps
            times.append(t)
            steps.append(n)
    curve = plot.RunCurve("game", "envpool", 1, "run", np.array(steps), np.zeros(len(steps)), np.array(times), t)
    stats, top = learning.segment_stats(curve, np.array([0.0, 1200.0, 1500.0]))
    assert [s["sps"] for s in stats] == pytest.approx([510, 650, 250], abs=5)  # the burst lifts part 1 by 10
    assert top == stats[0]["sps"]  # part 2 is too short to set it
    short, top = learning.segment_stats(curve, np.arange(0.0, 2700.0, 300.0))  # parts of 5 minutes
    assert top == max(s["sps"] for s in short) and top == pytest.approx(650, abs=5)  # no part of 10 min: the fastest


def test_games_lost_outright_late_in_a_run_are_counted_and_replays_shown(tmp_path):
    folder = tmp_path / "results" / "full-cpu"
    steps, returns = long_curve("good", PONG)
    late = np.flatnonzero(steps > 7_000_000)[::40]  # thrown games, 0-21, late in the run
    returns[late] = -21
    write_long_export(folder, steps, returns, game=PONG)
    (run,) = learning.load_exports(long_args(tmp_path))
    assert learning.lost_games_lines(run, 10_000_000, str(folder))[0].count("M ") == 6  # 4-5M to 9-10M
    lines = " ".join(learning.lost_games_lines(run, 10_000_000, str(folder)))
    reached = learning.first_reach(run, 18)[0]
    for lo in (7, 8, 9):
        window = (steps > lo * 1_000_000) & (steps <= (lo + 1) * 1_000_000)
        assert f"{lo}-{lo + 1}M {int((returns[window] < 0).sum())} of {int(window.sum())}" in lines
    assert f"first reached 18 (step {int(reached):,})" in lines and "Replays" not in lines
    os.makedirs(folder / learning.REPLAYS)
    replay = {
        "env_id": PONG,
        "checkpoint_step": 8_268_800,
        "backend": "sync",
        "games": 4,
        "lost_below": 0.0,
        "returns": [21, -21, 20, 21],
        "action_names": ["NOOP", "UP"],
        "machine": "test cpu, 2 cores",
        "lost": {"games": 1, "action_shares": [0.25, 0.75], "entropy": 0.5, "paddle_y_quartiles": [190, 201, 203]},
        "rest": {"games": 3, "action_shares": [0.5, 0.5], "entropy": 0.69},
    }
    (folder / learning.REPLAYS / "pong.json").write_text(json.dumps(replay))
    lines = " ".join(learning.lost_games_lines(run, 10_000_000, str(folder)))
    assert (
        "- Step 8,268,800, `sync` (test cpu, 2 cores): 4 games, mean 10.25, 1 lost (-21). Games lost (1): NOOP "
        "0.25, UP 0.75; policy entropy 0.50; paddle height quartiles 190/201/203. Other games (3): NOOP 0.50, "
        "UP 0.50; policy entropy 0.69." in lines
    )
    # a game that never scores below 0 (Breakout) gets no such paragraph
    write_long_export(tmp_path / "b" / "results" / "full-cpu", *long_curve("good"))
    (breakout,) = learning.load_exports(long_args(tmp_path / "b"))
    assert learning.lost_games_lines(breakout, 10_000_000, str(tmp_path / "b")) == []
