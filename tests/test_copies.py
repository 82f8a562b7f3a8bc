"""Copy it, rename it, change it: a script copied under a name of the user's choosing, with its own network, fields,
logged lines or statistics, keeps working with every tool around the scripts (the runner, the tuner, the cluster
submission, the eval, the hub and `enjoy`), which read a script's shape from the script, never from its file name.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import FAST, REPO_ROOT, find_run_dir, read_scalars, run_each, run_script

BREAKOUT = "BreakoutNoFrameskip-v4"
# a tiny run: 2 iterations of 2 envs x 32 steps (as tuner parameters, NAME=VALUE), one torch thread
SIZES = {"num-envs": 2, "num-steps": 32, "num-minibatches": 2, "update-epochs": 1, "total-timesteps": 128}
TINY = [*(word for name, value in SIZES.items() for word in (f"--{name}", str(value))), "--no-progress-bar"]

# (copy's name, the script it copies, its env id, its edits: (a line of the script, what replaces it))
WIDE = [
    ("            layer_init(nn.Linear(64 * 7 * 7, 512)),\n", "            layer_init(nn.Linear(64 * 7 * 7, 256)),\n"),
    (
        "        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)\n",
        "        self.actor = layer_init(nn.Linear(256, envs.single_action_space.n), std=0.01)\n",
    ),
    (
        "        self.critic = layer_init(nn.Linear(512, 1), std=1)\n",
        "        self.critic = layer_init(nn.Linear(256, 1), std=1)\n",
    ),
]
COMPUTED = [  # a setting computed at runtime, as batch_size is: not a flag
    (
        '    """the number of iterations (computed in runtime)"""\n',
        '    """the number of iterations (computed in runtime)"""\n'
        "    frames_per_iteration: tyro.conf.Suppress[int] = 0\n"
        '    """emulator frames per iteration (computed in runtime)"""\n',
    ),
    (
        "    args.num_iterations = args.total_timesteps // args.batch_size\n",
        "    args.num_iterations = args.total_timesteps // args.batch_size\n"
        "    args.frames_per_iteration = 4 * args.batch_size\n",
    ),
]
STEP_LOG = [  # a line logged inside the step loop, as CleanRL users add them
    (
        "            rewards[step] = host_reward.to(device, non_blocking=True)\n",
        "            rewards[step] = host_reward.to(device, non_blocking=True)\n"
        '            writer.add_scalar("charts/step_of_rollout", step, global_step)\n',
    )
]
STAT_LINE = '    stats["value_loss_x2"] = 2 * v_loss\n'  # one more logged statistic: one line
MORE_STATS = [
    (
        "    # a quantity added to `stats` is logged as losses/NAME; all come back from the device in one transfer\n",
        STAT_LINE
        + "    # a quantity added to `stats` is logged as losses/NAME; all come back from the device in one transfer\n",
    )
]
COPIES = {
    "breakout_rnd": ("ppo_atari.py", BREAKOUT, []),  # CleanRL's RND script's name, neither "atari" nor "multigpu"
    "dp_breakout": ("ppo_atari_multigpu.py", BREAKOUT, []),
    "my_cartpole": ("ppo.py", "CartPole-v1", []),
    "breakout_wide": ("ppo_atari.py", BREAKOUT, WIDE),
    "breakout_computed": ("ppo_atari.py", BREAKOUT, COMPUTED),
    "breakout_step_log": ("ppo_atari.py", BREAKOUT, STEP_LOG),
    "breakout_more_stats": ("ppo_atari.py", BREAKOUT, MORE_STATS),
}
RENAMED = ["breakout_rnd", "dp_breakout", "my_cartpole"]


def make_copy(folder: Path, name: str) -> Path:
    original, _, edits = COPIES[name]
    source = (REPO_ROOT / "cleanrl" / original).read_text()
    for line, replacement in edits:
        assert source.count(line) == 1, f"the line this copy edits has changed: {line!r}"
        source = source.replace(line, replacement)
    copy = folder / f"{name}.py"
    copy.write_text(source)
    return copy


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each copy (in a folder of the user's, not cleanrl/), trained once with --save-model: (script, run folder)."""
    root = tmp_path_factory.mktemp("copies")
    scripts = {name: make_copy(root, name) for name in COPIES}
    cases = [
        ([str(script), *TINY, "--env-id", COPIES[name][1], "--save-model", "--runs-dir", str(root / name)], root)
        for name, script in scripts.items()
    ]
    trained = {}
    for (name, script), result in zip(scripts.items(), run_each(cases, env=FAST, timeout=600, train=True)):
        assert result.returncode == 0, name + result.stderr[-3000:]
        trained[name] = (script, find_run_dir(root / name))
    return trained


def tool(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = run_script(args, cwd, timeout, FAST)
    assert result.returncode == 0, f"{shlex.join(args)}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", RENAMED)
def test_a_renamed_copy_runs_through_the_runner_and_the_tuner(name, copies, tmp_path):
    script, _ = copies[name]
    env_id = COPIES[name][1]
    command = f"python {script} {shlex.join(TINY)}"
    tool(
        [
            "-m",
            "cleanrl_utils.benchmark",
            "--env-ids",
            env_id,
            "--command",
            command,
            "--num-seeds",
            "1",
            "--workers",
            "1",
        ],
        tmp_path,
    )
    run = find_run_dir(tmp_path / "runs")  # named by the sweep, so that it resumes
    assert run.name == f"{env_id}__{name}__1" and (run / "checkpoint.pt").exists()

    tuned = tool(
        ["-m", "cleanrl_utils.tuner", "--script", str(script), "--target-scores", f"{env_id}=0,1", "--params"]
        + [f"{name}={value}" for name, value in SIZES.items()]
        + ["--metric", "losses/entropy", "--num-trials", "1", "--num-seeds", "1", "--pruner", "none"]
        + ["--studies-dir", str(tmp_path / "studies"), "--study-name", "copy"],
        tmp_path,
    )
    print(tuned.stdout)
    assert "COMPLETE" in tuned.stdout, tuned.stdout[-2000:]


@pytest.mark.parametrize("name", RENAMED)
def test_a_renamed_copy_is_submitted_as_its_script_is(name, copies, tmp_path):
    """No --env-id: the script's own default game, checked as the script checks it; the data-parallel copy goes to
    torchrun on an 8-GPU instance, the others to python."""
    script, _ = copies[name]
    env = {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    submit = ["cleanrl_utils/submit_exp.py", "--command", f"python {script}", "--instance-type", "p4d.24xlarge"]
    result = run_script([*submit, "--dry-run"], tmp_path, 300, env)
    assert result.returncode == 0, result.stderr[-3000:]
    commands = [
        r["params"]["containerOverrides"]["command"][2]
        for r in json.loads(result.stdout)
        if "containerOverrides" in r["params"]
    ]
    assert commands, result.stdout[-2000:]
    launcher = "exec torchrun --standalone --nnodes=1 --nproc-per-node=8 " if name == "dp_breakout" else "exec python "
    assert all(c.startswith(launcher + str(script)) for c in commands), commands
    assert all("--resume auto" in c for c in commands), commands  # each is a run that continues itself


@pytest.mark.slow
@pytest.mark.parametrize("name", [*RENAMED, "breakout_wide"])
def test_a_copy_is_evaluated_and_pushed_with_its_own_network(name, copies, tmp_path):
    script, run = copies[name]
    model = run / f"{name}.cleanrl_model"
    evaluated = tool(
        ["-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(model), "--eval-episodes", "1"], tmp_path
    )
    assert "1 episodes: mean return" in evaluated.stdout, evaluated.stdout[-2000:]
    pushed = tool(
        ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(run), "--repo-id", f"me/{name}"]
        + ["--eval-episodes", "1", "--dry-run"],
        tmp_path,
    )
    assert "nothing was sent" in pushed.stdout
    folder = run / "huggingface"
    assert (folder / f"{name}.py").read_text() == script.read_text()  # the script as it ran


@pytest.mark.slow
def test_a_copy_with_its_own_network_is_played_by_enjoy_from_a_local_folder(copies, tmp_path):
    script, run = copies["breakout_wide"]
    folder = run / "huggingface"
    if not (folder / "README.md").exists():  # (written by the push test, when it ran in this worker first)
        tool(["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(run), "--repo-id", "me/wide", "--dry-run"]
             + ["--eval-episodes", "1"], tmp_path)  # fmt: skip
    played = tool(
        ["-m", "cleanrl_utils.enjoy", "--hf-repository", str(folder), "--exp-name", "breakout_wide"]
        + ["--eval-episodes", "1"],
        tmp_path,
    )
    assert "1 episodes: mean return" in played.stdout, played.stdout[-2000:]
    weights = torch.load(run / "breakout_wide.cleanrl_model", weights_only=True)["model"]
    assert tuple(weights["critic.weight"].shape) == (1, 256)  # the copy's network, not ppo_atari.py's


@pytest.mark.slow
def test_a_copy_whose_script_is_gone_says_which_flag_points_at_it(copies, tmp_path):
    script, run = copies["breakout_wide"]
    moved = tmp_path / "breakout_wide.cleanrl_model"
    data = torch.load(run / "breakout_wide.cleanrl_model", weights_only=True)
    torch.save({**data, "script_path": str(tmp_path / "gone" / "breakout_wide.py")}, moved)
    result = run_script(["-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(moved)], tmp_path, 300, FAST)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "is not here: pass --script PATH" in result.stderr.strip().splitlines()[-1], result.stderr
    again = tool(
        ["-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(moved), "--script", str(script)]
        + ["--eval-episodes", "1"],
        tmp_path,
    )
    assert "1 episodes: mean return" in again.stdout


@pytest.mark.slow
def test_a_copy_that_adds_a_computed_field_gets_a_model_card_whose_command_runs(copies, tmp_path):
    script, run = copies["breakout_computed"]
    tool(["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(run), "--repo-id", "me/computed"]
         + ["--eval-episodes", "1", "--dry-run"], tmp_path)  # fmt: skip
    card = (run / "huggingface" / "README.md").read_text()
    command = re.search(r"```bash\n(python cleanrl/breakout_computed\.py .*)\n```", card).group(1)
    assert "--frames-per-iteration" not in command and "--batch-size" not in command, command
    words = shlex.split(command)[2:]  # run as the card says, with the copy where the card expects it
    (tmp_path / "cleanrl").mkdir()
    (tmp_path / "cleanrl" / script.name).write_text(script.read_text())
    again = tool([str(tmp_path / "cleanrl" / script.name), *words, "--runs-dir", str(tmp_path / "again")], tmp_path)
    assert "global_step=128/128" in again.stdout, again.stdout[-2000:]


@pytest.mark.slow
def test_a_line_logged_inside_the_step_loop_lands_on_one_step_per_step(copies):
    _, run = copies["breakout_step_log"]
    logged = read_scalars(run, "charts/step_of_rollout")
    steps_per_iteration, iterations = 32, 2
    assert [step for step, _ in logged] == [2 * (i + 1) for i in range(steps_per_iteration * iterations)]
    assert [value for _, value in logged] == [float(i % steps_per_iteration) for i in range(64)]
    # and the losses at the step each iteration ends, as CleanRL logs them
    assert [step for step, _ in read_scalars(run, "losses/value_loss")] == [64, 128]


@pytest.mark.slow
def test_a_statistic_added_in_one_line_is_logged(copies):
    _, run = copies["breakout_more_stats"]
    assert STAT_LINE.count("\n") == 1
    doubled = read_scalars(run, "losses/value_loss_x2")
    assert doubled and doubled == [(step, 2 * value) for step, value in read_scalars(run, "losses/value_loss")]


def test_the_tools_read_a_scripts_shape_from_its_code(tmp_path):
    from cleanrl_utils.script_shape import read_script
    from cleanrl_utils.validation import computed_fields

    for name in ("breakout_rnd", "dp_breakout", "my_cartpole", "breakout_computed"):
        make_copy(tmp_path, name)
    plain, ranks, classic = (
        read_script(str(tmp_path / f"{n}.py")) for n in ("breakout_rnd", "dp_breakout", "my_cartpole")
    )
    assert (plain.atari, plain.resumes, plain.torchrun) == (True, True, False)
    assert (ranks.atari, ranks.resumes, ranks.torchrun) == (True, True, True)
    assert (classic.atari, classic.resumes, classic.torchrun) == (False, True, False)
    assert plain.default("exp_name") == "breakout_rnd" and plain.default("env_id") == BREAKOUT
    assert "frames_per_iteration" in computed_fields(read_script(str(tmp_path / "breakout_computed.py")).args_type)
    assert computed_fields(ranks.args_type) == {
        "batch_size", "minibatch_size", "num_iterations", "world_size", "local_batch_size", "local_minibatch_size"
    }  # fmt: skip
    (tmp_path / "not_a_script.py").write_text("print('ran')\n")
    assert read_script(str(tmp_path / "not_a_script.py")) is None  # never loaded: loading it would run it
