"""cleanrl/ppo_atari_multigpu.py end to end on CPU with gloo: the issue's torchrun commands, identical ranks, two
"nodes" on loopback, a killed worker under torchrun --max-restarts=1, SIGTERM then --resume, and bad input.

The script reports nothing about its ranks' parameters: where a test holds the ranks to one model, each rank runs the
script under the lab's benchmark/lab/rank_params.py, which hashes that rank's parameters after the run (and a saved
model is hashed alike, from its file).

Sizes are tiny (1-2 envs per rank, 8-16 steps; the README's command and a few games excepted) so the whole file
stays within a few minutes on 2 cores. The update's equivalence with a single process is in test_multigpu_update.py.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import psutil
import pytest
import torch
import tyro
from multigpu_helpers import (
    ENV,
    QUIET,
    SCRIPT,
    TINY,
    TINY_BATCH,
    TINY_OPT_STEPS,
    TORCHRUN,
    assert_ranks_identical,
    free_port,
    hashed,
    kill_rank1_after_checkpoint_3,
    torchrun,
)
from helpers import LOSS_TAGS, REPO_ROOT, load_script, read_scalars, run_script, start_script, wait_for

from benchmark.lab import rank_params
from cleanrl_utils import checkpoint, distributed

PER_ITERATION_TAGS = ["charts/SPS", "charts/learning_rate", *LOSS_TAGS]  # one value per iteration each

mg = load_script(SCRIPT, "ppo_atari_multigpu_under_test")


def load_checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)


def optimizer_steps(ckpt: dict) -> int:
    """Adam's step count (the same for every parameter): how many updates the optimizer state has seen."""
    steps = {int(s["step"]) for s in ckpt["state"]["optimizer"]["state"].values()}
    assert len(steps) == 1, steps
    return steps.pop()


def assert_each_step_logged_once(run_dir: Path, batch: int, iterations: int) -> None:
    """No iteration lost or logged twice, after purges: each tag has exactly the steps batch, 2*batch, ..."""
    for tag in PER_ITERATION_TAGS:
        steps = [step for step, _ in read_scalars(run_dir, tag)]
        assert steps == [batch * i for i in range(1, iterations + 1)], (tag, steps)


# ---------------------------------------------------------------- the commands


@pytest.mark.torchrun
@pytest.mark.slow
def test_readme_command_two_ranks_sixteen_envs_identical_parameters(tmp_path):
    """The README's torchrun command: 8 envs per rank, the ranks end bit-identical, and the model rank 0 saved is
    theirs, both as hashed here and as benchmark/lab/rank_params.py's --model hashes it (for gpu_check)."""
    run_dir = tmp_path / "runs" / "readme"
    model = run_dir / "ppo_atari_multigpu.cleanrl_model"
    result = run_script(
        torchrun(2, hashes=tmp_path / "hashes", model=model)
        + ["--env-id", "BreakoutNoFrameskip-v4", "--num-envs", "16", "--total-timesteps", "2048"]
        + ["--learning-rate", "2.5e-4", "--save-model", "--run-name", "readme", *QUIET],
        cwd=tmp_path,
        timeout=400,
        env=ENV,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "world size 2" in output and "envs: 8 per rank, 16 in all" in output, output[-3000:]
    assert "batch 2048 (1024 per rank), minibatch 512 (256 per rank), 1 iteration;" in output
    digest = assert_ranks_identical(tmp_path / "hashes", 2)
    # the model rank 0 saved is the one every rank ended with
    assert rank_params.saved_model_sha256(model) == digest
    assert (tmp_path / "hashes" / rank_params.MODEL_HASH).read_text().strip() == digest
    ckpt = load_checkpoint(run_dir)
    assert optimizer_steps(ckpt) == 4 * 4 and ckpt["global_step"] == 2048  # the update did run
    assert_each_step_logged_once(run_dir, 2048, 1)


@pytest.mark.torchrun
@pytest.mark.slow
def test_two_nodes_on_loopback_and_every_ranks_games_reach_the_logs(tmp_path):
    """Two torchrun launchers, one rank each, meet through a c10d rendezvous on 127.0.0.1 (no shared folder).

    Rank 0's games are told apart by a run of its own: a 1-process run with rank 0's settings plays exactly rank 0's
    first rollout (the same seeds for its env and its sampling, the same initial parameters, which rank 0 broadcasts),
    and rank 0 logs every rank's games of an iteration in rank order. So the job's log must begin with that run's
    games and hold more after them, rank 1's."""
    port = free_port()
    procs = []
    # 320 steps of one game per rank: a Breakout game of the initial policy lasts ~150-300 steps
    game = ["--local-num-envs", "1", "--num-steps", "320", *QUIET]
    for node in (0, 1):
        (tmp_path / f"node{node}").mkdir()
        cmd = [TORCHRUN, "--nnodes=2", "--nproc_per_node=1", f"--node-rank={node}", "--rdzv-backend=c10d"]
        cmd += [f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=loopback", *hashed(tmp_path / "hashes"), SCRIPT]
        cmd += [*game, "--total-timesteps", "640"]
        procs.append(start_script(cmd, tmp_path / f"node{node}", tmp_path / f"node{node}.log", env=ENV))
    (tmp_path / "alone").mkdir()
    procs.append(
        start_script([SCRIPT, *game, "--total-timesteps", "320"], tmp_path / "alone", tmp_path / "alone.log", env=ENV)
    )
    codes = [p.wait(timeout=400) for p in procs]
    output = "".join((tmp_path / f"{n}.log").read_text() for n in ("node0", "node1", "alone"))
    assert codes == [0, 0, 0], output[-4000:]
    assert_ranks_identical(tmp_path / "hashes", 2)
    # rank 0 (on whichever node it landed) logged the games of both ranks
    run_dirs = [d for n in (0, 1) for d in (tmp_path / f"node{n}" / "runs").glob("*") if d.is_dir()]
    assert len(run_dirs) == 1

    def games(run_dir: Path) -> list[tuple[float, float]]:  # (return, length) of every game, in the order logged
        lengths = [v for _, v in read_scalars(run_dir, "charts/episodic_length")]
        return list(zip([v for _, v in read_scalars(run_dir, "charts/episodic_return")], lengths, strict=True))

    both, rank0 = games(run_dirs[0]), games(next((tmp_path / "alone" / "runs").iterdir()))
    assert rank0 and both[: len(rank0)] == rank0, (both, rank0)  # rank 0's games, first
    assert len(both) > len(rank0), (both, rank0)  # then rank 1's


# ---------------------------------------------------------------- recovery


@pytest.mark.torchrun
@pytest.mark.slow
def test_killed_worker_restarts_resumes_and_ends_at_the_same_final_step(tmp_path):
    iterations = 24
    log = tmp_path / "torchrun.log"
    cmd = torchrun(2, "--max-restarts=1", hashes=tmp_path / "hashes") + TINY + QUIET
    cmd += ["--total-timesteps", str(iterations * TINY_BATCH), "--checkpoint-interval", "3"]
    code = kill_rank1_after_checkpoint_3(cmd, tmp_path, log)
    output = log.read_text()
    assert code == 0, output[-4000:]
    resumed = re.search(r"resuming from iteration (\d+) \(global step (\d+)\) \(torchrun restart 1\)", output)
    assert resumed, output[-4000:]
    assert 3 <= int(resumed[1]) < iterations and int(resumed[2]) == int(resumed[1]) * TINY_BATCH
    run_dir = next((tmp_path / "runs").iterdir())  # the restart found the first attempt's folder: only one
    assert len(list((tmp_path / "runs").iterdir())) == 1
    ckpt = load_checkpoint(run_dir)
    # an uninterrupted run ends at iteration 24, step 24 * 32, after 24 * 4 optimizer steps: so must this one
    assert (ckpt["iteration"], ckpt["global_step"]) == (iterations, iterations * TINY_BATCH)
    assert optimizer_steps(ckpt) == iterations * TINY_OPT_STEPS
    assert_each_step_logged_once(run_dir, TINY_BATCH, iterations)
    assert_ranks_identical(tmp_path / "hashes", 2)  # written at the end of the restarted attempt


@pytest.mark.torchrun
@pytest.mark.slow
def test_sigterm_checkpoints_and_resume_continues_the_same_curve(tmp_path):
    """SIGTERM through torchrun checkpoints and stops both ranks; --resume continues the same curve to the end (one
    learning-rate schedule, Adam's moments kept, each step logged once, ranks identical). The runs size their envs
    CleanRL's way, per rank (--local-num-envs 2: 4 in all, batch 32 as TINY's), and only rank 0 prints progress."""
    iterations = 24
    local = ["--local-num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2"]
    common = local + QUIET + ["--total-timesteps", str(iterations * TINY_BATCH), "--run-name", "preempted"]
    log = tmp_path / "first.log"
    proc = start_script(torchrun(2) + common + ["--checkpoint-interval", "3"], tmp_path, log, env=ENV)
    try:
        wait_for(log, "checkpoint: iteration 3,", proc, timeout=300)
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to its workers, as on a cluster preemption
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert code != 0
    stopped = re.search(r"stopped at global step (\d+);", output)
    assert stopped, output[-4000:]
    stop_iteration = int(stopped[1]) // TINY_BATCH
    run_dir = tmp_path / "runs" / "preempted"
    ckpt = load_checkpoint(run_dir)
    assert ckpt["iteration"] == stop_iteration < iterations
    assert optimizer_steps(ckpt) == stop_iteration * TINY_OPT_STEPS

    result = run_script(
        torchrun(2, hashes=tmp_path / "hashes") + common + ["--resume"], cwd=tmp_path, timeout=400, env=ENV
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"resuming from iteration {stop_iteration} (global step {stop_iteration * TINY_BATCH})" in output
    assert "envs: 2 per rank, 4 in all" in output and f"batch {TINY_BATCH} ({TINY_BATCH // 2} per rank)" in output
    end = iterations * TINY_BATCH
    assert output.count(f"global_step={end}/{end} (100%), SPS: ") == 1  # the progress line of rank 0 (no terminal)
    ckpt = load_checkpoint(run_dir)
    assert (ckpt["iteration"], ckpt["global_step"]) == (iterations, iterations * TINY_BATCH)
    assert optimizer_steps(ckpt) == iterations * TINY_OPT_STEPS  # Adam's moments went on, not restarted
    assert_each_step_logged_once(run_dir, TINY_BATCH, iterations)
    # the learning rate anneals along one schedule across the stop: lr * (1 - (i - 1) / N) at step i * batch
    lrs = [value for _, value in read_scalars(run_dir, "charts/learning_rate")]
    expected = [2.5e-4 * (1 - (i - 1) / iterations) for i in range(1, iterations + 1)]
    assert lrs == pytest.approx(expected, rel=1e-5)
    assert_ranks_identical(tmp_path / "hashes", 2)


@pytest.mark.torchrun
@pytest.mark.slow
def test_rank_0_alone_says_that_threads_are_capped_and_that_the_run_stops(tmp_path):
    """Two ranks (torchrun's variables, set by hand) asked for 200 torch threads, then stopped by one signal each, as
    a Ctrl-C reaches every rank: each rank caps its threads at its share of the cores and stops, and only rank 0
    says so (before, the stop line came once per rank)."""
    share = max(1, len(psutil.Process().cpu_affinity()) // 2)
    if share >= 200:
        pytest.skip("this machine has 400 cores or more")
    port, procs = free_port(), []
    cmd = [
        SCRIPT,
        *TINY,
        *QUIET,
        "--total-timesteps",
        str(50 * TINY_BATCH),
        "--checkpoint-interval",
        "1",
        "--torch-threads",
        "200",
        "--run-name",
        "stopped",
    ]
    try:
        for rank in (0, 1):
            procs.append(start_script(cmd, tmp_path, tmp_path / f"rank{rank}.log", env=ranks_env(rank, port)))
        wait_for(tmp_path / "rank0.log", "checkpoint: iteration 1,", procs[0], timeout=300)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    logs = [(tmp_path / f"rank{rank}.log").read_text() for rank in (0, 1)]
    assert codes == [128 + signal.SIGTERM] * 2, logs
    note = (
        f"note: --torch-threads 200 is more than the {share} core{'s' * (share > 1)} this process may use: using "
        f"{share} (more threads than cores only wait for each other)"
    )
    stopping = "stopping at the end of this iteration (a checkpoint will be saved)"
    assert logs[0].count(note) == 1 and logs[0].count(stopping) == 1 and "stopped at global step" in logs[0], logs[0]
    assert note not in logs[1] and stopping not in logs[1] and "note:" not in logs[1], logs[1]


# ---------------------------------------------------------------- bad input: one-line error, printed once
# Each check is first tested on the function that every rank runs (in this process: cheap); then, end to end, one
# check before the group forms (under torchrun: both ranks' stderr), one after it (rank 0 finds a corrupt checkpoint
# and tells rank 1), and a rank whose partner never comes.


def expect_error(fragment: str, check, *args) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check(*args)
    message = str(exit_info.value.code)
    assert message.startswith("error: ") and "\n" not in message and fragment in message, message


PRE_GROUP = {
    # case: (arguments, local world size, fragment of the error)
    "not divisible": (["--num-envs", "3"], 2, "--num-envs 3 is not divisible by the world size 2"),
    "disagree": (["--num-envs", "8", "--local-num-envs", "3"], 2, "disagree: with world size 2, --num-envs must be 6"),
    "device ids": (["--device-ids", "0"], 2, "--device-ids has 1 entry but this node runs 2 ranks"),
    "nccl": (["--backend", "nccl"], 2, "--backend nccl needs a CUDA device on every rank"),
    "minibatches": (["--local-num-envs", "1", "--num-steps", "6"], 2, "is not divisible by --num-minibatches 4"),
    "1e2 timesteps": (["--local-num-envs", "2", "--total-timesteps", "1e2"], 2, "--total-timesteps 100 is smaller"),
}


@pytest.mark.parametrize("case", list(PRE_GROUP))
def test_checks_before_the_group_forms(case):
    argv, world_size, fragment = PRE_GROUP[case]
    args = tyro.cli(mg.Args, args=argv)
    info = distributed.DistInfo(rank=1, world_size=world_size, local_rank=1, local_world_size=world_size, launched=True)

    def checks():  # what every rank runs before init_process_group, in this order
        distributed.resolve_sizes(args, info.world_size)
        distributed.resolve_device(args, info)

    expect_error(fragment, checks)


def test_counts_as_users_type_them_and_no_flags_for_computed_sizes(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, mg.__name__, mg)  # tyro reads the Args source for its error message
    assert tyro.cli(mg.Args, args=["--total-timesteps", "1e6"]).total_timesteps == 1_000_000
    expect_error("'12.5' is not a whole number", lambda: tyro.cli(mg.Args, args=["--total-timesteps", "12.5"]))
    assert tyro.cli(mg.Args, args=["--seed", "1e3"]).seed == 1000  # a seed is typed as counts are
    expect_error("'one' is not a number", lambda: tyro.cli(mg.Args, args=["--seed", "one"]))
    for computed in ("--world-size", "--batch-size", "--local-minibatch-size", "--num-iterations"):
        with pytest.raises(SystemExit):  # filled in at run time, not command-line flags
            tyro.cli(mg.Args, args=[computed, "3"])
    capsys.readouterr()


def write_checkpoint(path: Path, env_id: str = "BreakoutNoFrameskip-v4", actions: int = 4, **sizes) -> mg.Args:
    """A checkpoint of a run on 2 ranks (by default 1 env x 16 steps per rank, 64 steps in all)."""
    args = mg.Args(env_id=env_id, **{"local_num_envs": 1, "num_steps": 16, "total_timesteps": 64, **sizes})
    distributed.resolve_sizes(args, 2)
    agent = mg.Agent(SimpleNamespace(single_action_space=gym.spaces.Discrete(actions)))
    optimizer = torch.optim.Adam(agent.parameters())
    path.parent.mkdir(parents=True, exist_ok=True)
    rngs = [checkpoint.rng_state(torch.device("cpu"))] * 2
    checkpoint.save_checkpoint(str(path), {"agent": agent, "optimizer": optimizer}, args, 1, 32, rngs, [])
    return args


def corrupt(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:5000])  # cut short, as by a full disk


CHECKPOINTS = {
    # case: (how the checkpoint differs from the run, fragment of the error)
    "other env": ({"env_id": "PongNoFrameskip-v4", "actions": 6}, "was made for PongNoFrameskip-v4, not --env-id"),
    "other arch": ({"actions": 6}, "another network architecture than this script's agent"),  # Breakout has 4
    "other batch": ({"num_steps": 32}, "resume with the same --num-envs and --num-steps"),
    "corrupt": ({}, "cannot read the checkpoint"),
    "foreign": ({}, "is not a checkpoint of ppo_atari_multigpu.py"),
}


@pytest.mark.parametrize("case", list(CHECKPOINTS))
def test_checkpoint_checks(tmp_path, case):
    differences, fragment = CHECKPOINTS[case]
    path = tmp_path / "checkpoint.pt"
    write_checkpoint(path, **differences)
    if case == "corrupt":
        corrupt(path)
    if case == "foreign":
        torch.save({"model": {}}, path)  # e.g. a saved model, not a checkpoint
    args = mg.Args(local_num_envs=1, num_steps=16, total_timesteps=64)
    distributed.resolve_sizes(args, 2)
    agent = mg.Agent(SimpleNamespace(single_action_space=gym.spaces.Discrete(4)))
    state = {"agent": agent, "optimizer": torch.optim.Adam(agent.parameters())}
    expect_error(
        fragment,
        lambda: checkpoint.check_checkpoint(
            checkpoint.read_checkpoint(str(path), "ppo_atari_multigpu.py"), str(path), state, args
        ),
    )


def ranks_env(rank: int, port: int) -> dict[str, str]:
    """The variables torchrun gives a worker of a 2-rank job."""
    env = dict(ENV, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    return dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


CHECKPOINT_RUN = ["--local-num-envs", "1", "--num-steps", "16", "--total-timesteps", "64"]
CHECKPOINT_RUN += ["--resume", "--run-name", "old"]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Start the end-to-end cases at once; return the exit codes and outputs."""
    root = tmp_path_factory.mktemp("bad")
    procs = {}
    # a corrupt checkpoint, found by rank 0 after the group formed
    write_checkpoint(root / "runs" / "old" / "checkpoint.pt")
    corrupt(root / "runs" / "old" / "checkpoint.pt")
    port = free_port()
    for rank in (0, 1):
        cmd = [SCRIPT, *CHECKPOINT_RUN, *QUIET]
        procs[f"corrupt{rank}"] = start_script(cmd, root, root / f"corrupt{rank}.log", env=ranks_env(rank, port))
    # rank 0 of 2 whose partner never comes: gives up after --dist-timeout instead of waiting forever
    cmd = [SCRIPT, *QUIET, "--dist-timeout", "5"]
    procs["alone"] = start_script(cmd, root, root / "alone.log", env=ranks_env(0, free_port()))
    # a check before the group forms, under the real launcher: each rank's stderr in its own file
    # --monitor-interval: torchrun's agent looks at its workers every 0.1 s by default and SIGTERMs the others as
    # soon as one has failed; a rank still importing torch on the loaded 2 cores then dies before its own check
    # (seen once: an empty stderr.log; reproduced by delaying rank 1 by 2 s). 5 s lets every rank reach its check.
    cmd = torchrun(2, "--redirects=3", "--monitor-interval=5", f"--log-dir={root / 'logs'}")
    cmd += ["--num-envs", "3", *QUIET]
    procs["torchrun"] = start_script(cmd, root, root / "torchrun.log", env=ENV)
    started = time.monotonic()
    codes = {key: proc.wait(timeout=400) for key, proc in procs.items()}
    elapsed = time.monotonic() - started
    logs = {key: (root / f"{key}.log").read_text() for key in procs}
    return SimpleNamespace(codes=codes, logs=logs, root=root, elapsed=elapsed)


def assert_error_line(text: str, fragment: str) -> None:
    """One `error: ...` line with the fragment, as the last line, and no traceback (ALE's banner may precede it)."""
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1] and fragment in errors[0], text[-3000:]


@pytest.mark.torchrun
@pytest.mark.slow
def test_bad_input_before_the_group_under_torchrun_fails_on_both_ranks_and_one_prints_it(bad_runs):
    assert bad_runs.codes["torchrun"] != 0
    stderr_files = sorted((bad_runs.root / "logs").rglob("stderr.log"))
    assert len(stderr_files) == 2  # attempt_0/0 and attempt_0/1
    assert_error_line(stderr_files[0].read_text(), "--num-envs 3 is not divisible by the world size 2")
    assert "error" not in stderr_files[1].read_text()  # local rank 1 finds the same and leaves it to local rank 0


@pytest.mark.torchrun
@pytest.mark.slow
def test_corrupt_checkpoint_stops_every_rank_with_one_line(bad_runs):
    assert bad_runs.codes["corrupt0"] != 0 and bad_runs.codes["corrupt1"] != 0
    assert_error_line(bad_runs.logs["corrupt0"], "cannot read the checkpoint runs/old/checkpoint.pt")
    assert "error" not in bad_runs.logs["corrupt1"]  # rank 0 found it and prints it


@pytest.mark.torchrun
@pytest.mark.slow
def test_a_rank_left_alone_gives_up_after_the_timeout(bad_runs):
    assert bad_runs.codes["alone"] != 0
    assert_error_line(bad_runs.logs["alone"], "rank 0: the process group did not form")
    assert bad_runs.elapsed < 300


# a rank whose SIGTERM lands just after an iteration's gather (rank 0 after iteration 2's): sitecustomize wraps the
# gather before the script imports it
LATE_SIGNAL = """
import os, signal
from cleanrl_utils import distributed
gather = distributed.gather_to_all
calls = [0]
def late(*args, **kwargs):
    result = gather(*args, **kwargs)
    calls[0] += 1
    if os.environ.get("RANK") == "0" and calls[0] == 3:  # the start's gather, then iterations 1 and 2
        os.kill(os.getpid(), signal.SIGTERM)
    return result
distributed.gather_to_all = late
"""


@pytest.mark.torchrun
@pytest.mark.slow
def test_a_signal_after_the_iterations_gather_stops_every_rank_at_the_next_one(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(LATE_SIGNAL)
    common = (
        TINY
        + QUIET
        + [
            "--total-timesteps",
            str(6 * TINY_BATCH),
            "--run-name",
            "late",
            "--checkpoint-interval",
            "100",
            "--dist-timeout",
            "60",
        ]
    )
    result = run_script(
        torchrun(2) + common, cwd=tmp_path, timeout=240, env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{REPO_ROOT}"}
    )
    output = result.stdout + result.stderr
    # not one rank leaving at iteration 2 while the other goes on (a deadlock until --dist-timeout): both at 3
    assert result.returncode != 0 and f"stopped at global step {3 * TINY_BATCH};" in output, output[-4000:]
    assert load_checkpoint(tmp_path / "runs" / "late")["iteration"] == 3
    assert "dist-timeout" not in output.split("stopped at global step")[1] and "lost contact" not in output
