"""cleanrl_utils/plot.py on ppo.py runs made by the benchmark runner: figure files, the results table, and
one-line errors for bad input."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from helpers import REPO_ROOT, assert_one_line_error, read_scalars, run_script

PLOT = "cleanrl_utils/plot.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two seeds of a tiny CartPole ppo.py run, made with the benchmark runner."""
    root = tmp_path_factory.mktemp("plot")
    command = (
        f"{sys.executable} {REPO_ROOT / 'cleanrl' / 'ppo.py'} --total-timesteps 512 --num-envs 2 "
        "--num-steps 64 --no-progress-bar --runs-dir runs"
    )
    res = run_script(
        [
            "cleanrl_utils/benchmark.py",
            "--env-ids",
            "CartPole-v1",
            "--num-seeds",
            "2",
            "--workers",
            "2",
            "--command",
            command,
        ],
        cwd=root,
        timeout=400,
    )
    assert res.returncode == 0, res.stderr
    return root / "runs"


def copy_run(src, dst, **changed: str) -> None:
    """A copy of a run's episodic returns (steps and wall times) whose logged hyperparameters differ in `changed`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    acc = EventAccumulator(str(src), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    text = acc.Tensors("hyperparameters/text_summary")[0].tensor_proto.string_val[0].decode()
    rows = [line.split("|") for line in text.splitlines()]
    text = "\n".join(
        "|".join(["", r[1], changed[r[1]], ""]) if len(r) == 4 and r[1] in changed else "|".join(r) for r in rows
    )
    with SummaryWriter(str(dst)) as writer:
        writer.add_text("hyperparameters", text)
        for e in acc.Scalars("charts/episodic_return"):
            writer.add_scalar("charts/episodic_return", e.value, e.step, walltime=e.wall_time)


def table_rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("env id", "---"):
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


@pytest.mark.slow
def test_plot_writes_figures_and_final_return_table(runs, tmp_path):
    # a second "script" (the same runs under another exp_name) to overlay, and an env id with a slash, whose
    # run directory sits one folder deeper
    # a second "script" (the same runs logged under another exp_name) and another env id, in folders named any
    # way (as `--run-name` runs are): the plot reads env id, exp name and seed from the logged hyperparameters
    other = tmp_path / "other"
    for i, run in enumerate(sorted(runs.iterdir())):
        copy_run(run, other / f"my-run-{i}", exp_name="ppo_copy")
    copy_run(sorted(runs.iterdir())[0], other / "ALE" / "breakout-try", env_id="ALE/Breakout-v5")

    res = run_script(
        [PLOT, "--run-dirs", str(runs), str(other), "--output", str(tmp_path / "fig" / "ppo")],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    png = (tmp_path / "fig" / "ppo.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert (tmp_path / "fig" / "ppo.svg").read_text().rstrip().endswith("</svg>")

    rows = table_rows(res.stdout)
    assert set(rows) == {("CartPole-v1", "ppo"), ("CartPole-v1", "ppo_copy"), ("ALE/Breakout-v5", "ppo")}
    # final return: per seed the mean of its last 100 episodes, then mean +- std over seeds
    finals = np.array(
        [np.mean([v for _, v in read_scalars(run, "charts/episodic_return")][-100:]) for run in sorted(runs.iterdir())]
    )
    assert len(finals) == 2
    for script in ("ppo", "ppo_copy"):
        seeds, final, runtime = rows[("CartPole-v1", script)]
        assert seeds == "2"
        assert final == f"{finals.mean():.2f} ± {finals.std():.2f}"
        assert script == "ppo_copy" or re.fullmatch(r"\d+:\d\d:\d\d ± \d+:\d\d:\d\d", runtime)  # (a copy starts now)
    assert rows[("ALE/Breakout-v5", "ppo")][:2] == ["1", f"{finals[0]:.2f} ± 0.00"]


@pytest.mark.slow
def test_runs_without_episodes_are_skipped_with_a_warning(runs, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    silent = tmp_path / "Acrobot-v1__ppo__1__1700000000"
    with SummaryWriter(str(silent)) as writer:
        writer.add_scalar("charts/SPS", 100, 64)
    res = run_script(
        [PLOT, "--run-dirs", str(runs), str(tmp_path), "--output", str(tmp_path / "p"), "--formats", "png"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert f"warning: skipping {silent}: no charts/episodic_return logged" in res.stderr
    assert set(table_rows(res.stdout)) == {("CartPole-v1", "ppo")}
    assert (tmp_path / "p.png").stat().st_size > 0 and not (tmp_path / "p.svg").exists()

    # only runs without episodes: nothing to plot
    res = run_script([PLOT, "--run-dirs", str(silent)], cwd=tmp_path, timeout=120)
    assert res.returncode != 0 and res.stderr.strip().splitlines()[-1].startswith("error: no run under")


def test_bad_paths_give_one_line_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    cases = [
        (["--run-dirs", str(tmp_path / "missing")], f"run directory '{tmp_path / 'missing'}' does not exist"),
        (["--run-dirs", str(tmp_path / "a_file")], f"run directory '{tmp_path / 'a_file'}' is not a directory"),
        (["--run-dirs", str(tmp_path / "empty")], f"no TensorBoard event files under '{tmp_path / 'empty'}'"),
    ]
    for argv, message in cases:
        assert_one_line_error(run_script([PLOT, *argv], cwd=tmp_path, timeout=300), message)


@pytest.mark.parametrize("name", ["a/b", "..", "../x", ""])
def test_an_exp_name_that_is_not_a_folder_name_is_refused(tmp_path, name):
    """The scripts' name rule: such an exp name can match no run, so it is a mistake, said before anything is read."""
    res = run_script(
        [PLOT, "--run-dirs", str(tmp_path / "missing"), "--exp-names", "ppo", name], cwd=tmp_path, timeout=300
    )
    assert_one_line_error(res, f"--exp-names {name!r} is not a folder name: a run is one folder inside --runs-dir")


def test_missing_matplotlib_says_how_to_install(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from cleanrl_utils.plot import main; "
        "sys.exit(main(['--run-dirs', '.']))"
    )
    res = run_script(["-c", code], cwd=tmp_path, timeout=300)
    assert_one_line_error(res, "plotting needs matplotlib: pip install -e '.[plot]'")


def test_runs_are_grouped_by_configuration_not_by_env_id(tmp_path):
    """Runs of one script that differ in a hyperparameter (here the backend) are separate rows and curves; only
    runs that differ in their seed (and in bookkeeping such as the run folder) are counted as seeds of one row."""
    from torch.utils.tensorboard import SummaryWriter

    def write_run(seed: int, backend: str, returns: list[float]) -> None:
        name = f"CartPole-v1__ppo__{seed}__{1700000000 + seed}{len(backend)}"
        params = {
            "exp_name": "ppo",
            "seed": seed,
            "env_id": "CartPole-v1",
            "vector_env": backend,
            "runs_dir": f"runs_{seed}",
            "num_envs": 4,
            "batch_size": 512,
        }
        with SummaryWriter(str(tmp_path / "runs" / name)) as writer:
            writer.add_text(
                "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in params.items())
            )
            for step, value in enumerate(returns):
                writer.add_scalar("charts/episodic_return", value, 100 * (step + 1))

    write_run(1, "sync", [10.0, 20.0])
    write_run(2, "sync", [30.0, 40.0])
    write_run(1, "async", [50.0, 70.0])
    res = run_script(
        [PLOT, "--run-dirs", str(tmp_path / "runs"), "--output", str(tmp_path / "p"), "--formats", "png"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rows = table_rows(res.stdout)
    assert set(rows) == {("CartPole-v1", "ppo (vector_env=sync)"), ("CartPole-v1", "ppo (vector_env=async)")}
    assert rows[("CartPole-v1", "ppo (vector_env=sync)")][:2] == ["2", "25.00 ± 10.00"]  # seed means 15 and 35
    assert rows[("CartPole-v1", "ppo (vector_env=async)")][:2] == ["1", "60.00 ± 0.00"]


def test_each_panel_is_labelled_by_its_axis_and_the_legend_names_every_configuration():
    """The x labels are the axes' quantities (a loop variable once leaked the last config's name into them), and
    every configuration's legend entry lies inside the figure (5 entries used to run off a 1-game figure)."""
    from cleanrl_utils import plot

    plt = plot.import_pyplot()
    steps, times = np.arange(1, 41) * 100, np.arange(40, dtype=float)
    names = ["ale", "envpool", "multigpu_2ranks", "sync", "sync_1env"]
    groups = {
        ("BreakoutNoFrameskip-v4", name): [
            plot.RunCurve("BreakoutNoFrameskip-v4", name, 1, "", steps, np.full(40, float(i)), times, 40.0)
        ]
        for i, name in enumerate(names)
    }
    fig = plot.draw(groups, plot.Args(smoothing_window=5), plt)
    fig.canvas.draw()
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_xlabel() for ax in visible] == ["global step", "wall-clock time (s)"]
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == names
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    top_of_panels = max(ax.get_window_extent().y1 for ax in visible)
    assert box.y0 >= top_of_panels - 1  # above the panels, not over them
    plt.close(fig)


def test_a_run_without_logged_identity_is_named_by_its_folder_or_skipped(tmp_path):
    """Runs that logged no hyperparameters: a `{env_id}__{exp_name}__{seed}__{time}` folder still names them, any
    other folder name is skipped with the reason."""
    from torch.utils.tensorboard import SummaryWriter

    for name in ("CartPole-v1__ppo__1__1700000000", "my-run"):
        with SummaryWriter(str(tmp_path / "runs" / name)) as writer:
            writer.add_scalar("charts/episodic_return", 10.0, 100)
    res = run_script(
        [PLOT, "--run-dirs", str(tmp_path / "runs"), "--output", str(tmp_path / "p"), "--formats", "png"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert set(table_rows(res.stdout)) == {("CartPole-v1", "ppo")}
    assert f"warning: skipping {tmp_path / 'runs' / 'my-run'}: it logged no env_id, exp_name and seed" in res.stderr


def write_returns(run_dir, seed: int, returns: list[float]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    params = {"exp_name": "ppo", "seed": seed, "env_id": "CartPole-v1"}
    with SummaryWriter(str(run_dir)) as writer:
        writer.add_text(
            "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in params.items())
        )
        for step, value in enumerate(returns):
            writer.add_scalar("charts/episodic_return", value, 100 * (step + 1))


def test_a_damaged_events_file_is_named_with_the_step_where_its_data_ends(tmp_path):
    """A cut events file, or one with bytes changed inside, is read as far as it is whole: the plot says so, naming the
    file and the last step it holds (it used to plot what was left without a word)."""
    write_returns(tmp_path / "runs" / "cut", 1, [float(i) for i in range(40)])
    write_returns(tmp_path / "runs" / "changed", 2, [float(i) for i in range(40)])
    write_returns(tmp_path / "runs" / "stub", 3, [1.0])
    cut, changed, stub = (
        next((tmp_path / "runs" / name).glob("events.out.tfevents.*")) for name in ("cut", "changed", "stub")
    )
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    data = bytearray(changed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    changed.write_bytes(bytes(data))
    stub.write_bytes(stub.read_bytes()[:10])
    res = run_script(
        [PLOT, "--run-dirs", str(tmp_path / "runs"), "--output", str(tmp_path / "p"), "--formats", "png"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    for path in (cut, changed):
        found = re.search(
            rf"warning: {re.escape(str(path))} is damaged \(cut short or changed\): its data ends at step (\d+)",
            res.stderr,
        )
        assert found, res.stderr
        assert 100 <= int(found.group(1)) < 4000  # somewhere inside, not the end
    assert f"warning: {stub} is damaged (cut short or changed): its data ends before its first step" in res.stderr
    assert f"skipping {stub.parent}: no charts/episodic_return logged (its events file is damaged)" in res.stderr
    assert "no episode finished" not in res.stderr


def test_the_seeds_column_counts_seeds_not_runs(tmp_path):
    """A copy of a run of seed 1 is a second run of that seed: 2 seeds, 3 runs."""
    write_returns(tmp_path / "runs" / "a", 1, [10.0])
    write_returns(tmp_path / "runs" / "a-copy", 1, [10.0])
    write_returns(tmp_path / "runs" / "b", 2, [20.0])
    res = run_script(
        [PLOT, "--run-dirs", str(tmp_path / "runs"), "--output", str(tmp_path / "p"), "--formats", "png"],
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert table_rows(res.stdout)[("CartPole-v1", "ppo")][0] == "2 (3 runs)"
