"""--bf16 on the three scripts: the network's trunk (ppo.py: both MLPs) under bfloat16 autocast, its output cast back
to float32; parameters, heads, log-probabilities, losses, optimizer state, GAE, checkpoints and saved models float32.

Against float32 (the fixed-seed run of tests/test_fixed_seed.py, 4 envs x 32 steps, 4 iterations, one thread):
the largest difference of a logged scalar over the run, relative to its largest magnitude, measured on the AMD EPYC
the fixture was recorded on:

    ppo_atari.py --bf16     native (AVX512-BF16) 0.069   AVX2 0.060   SSE4.1 0.093   (all: losses/old_approx_kl)
    ppo.py --bf16           native 0.0075 (old_approx_kl), seed 3, 2 envs x 64 steps, 4 iterations

The KL estimates are means of differences of log-probabilities, near 1e-3: bfloat16's 8-bit mantissa in the trunk
moves them most. ``BOUND`` (0.2) is twice the largest of these, so that another CPU's bfloat16 kernels pass, and
below what a real change of the computation does (``--clip-coef 0.2``: the policy loss by 0.48; see
tests/test_fixed_seed.py). That the flag changes the numbers at all is checked against the fixture's own tolerance
(1e-2, which other CPUs' float32 stays within): the Atari run exceeds it (value loss, policy loss, both KLs,
explained variance); ppo.py's small MLPs stay within it, so that one is compared with a float32 run made alongside.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from helpers import FAST, LOSS_TAGS, find_run_dir, load_script, read_scalars, run_each
from fixed_seed import FIXTURE, RUN, SCRIPTS, SEED, TOLERANCE, Losses, differences, logged_losses

from cleanrl_utils.evals.ppo_eval import evaluate
from cleanrl_utils.resume import MAY_CHANGE_ON_RESUME

BOUND = 0.2
BATCH = 128  # RUN: 4 envs x 32 steps

ppo_atari = load_script(SCRIPTS["ppo_atari"], "ppo_atari_bf16_test")
ppo = load_script("cleanrl/ppo.py", "ppo_bf16_test")


def finite(losses: Losses) -> bool:
    return all(math.isfinite(value) for values in losses.values() for _, value in values)


def floating_dtypes(obj) -> set[torch.dtype]:
    """The dtypes of every floating-point tensor in a (nested) checkpoint or saved model."""
    if isinstance(obj, torch.Tensor):
        return {obj.dtype} if obj.is_floating_point() else set()
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return set().union(*map(floating_dtypes, obj)) if obj else set()
    return set()


# ---------------------------------------------------------------- the networks, in-process


def test_atari_agent_trunk_runs_in_bf16_and_the_rest_in_float32():
    envs = type("Envs", (), {"single_action_space": gym.spaces.Discrete(4)})
    agent, plain = ppo_atari.Agent(envs, bf16=True), ppo_atari.Agent(envs)
    plain.load_state_dict(agent.state_dict())
    assert {p.dtype for p in agent.parameters()} == {torch.float32}
    frames = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    actions = torch.arange(5) % 4
    with torch.no_grad():
        hidden, fp32_hidden = agent.hidden(frames), plain.hidden(frames)
        _, logprob, entropy, value = agent.get_action_and_value(frames, actions)
    assert hidden.dtype == logprob.dtype == entropy.dtype == value.dtype == torch.float32
    # the trunk's output was computed in bfloat16: every value is a bfloat16 one (float32's are not)
    assert torch.equal(hidden, hidden.bfloat16().float())
    assert not torch.equal(fp32_hidden, fp32_hidden.bfloat16().float())
    torch.testing.assert_close(hidden, fp32_hidden, rtol=0.05, atol=0.05)
    # the heads ran in float32 on it
    assert torch.equal(value, agent.critic(hidden))
    assert not torch.equal(value, value.bfloat16().float())


def test_classic_agent_networks_run_in_bf16_and_return_float32():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent, plain = ppo.Agent(envs, bf16=True), ppo.Agent(envs)
    envs.close()
    plain.load_state_dict(agent.state_dict())
    assert {p.dtype for p in agent.parameters()} == {torch.float32}
    obs = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, logprob, entropy, value = agent.get_action_and_value(obs)
        _, _, _, fp32_value = plain.get_action_and_value(obs)
    assert logprob.dtype == entropy.dtype == value.dtype == agent.get_value(obs).dtype == torch.float32
    # the critic's output, computed in bfloat16: bfloat16 values (float32's are not)
    assert torch.equal(value, value.bfloat16().float()) and torch.equal(agent.get_value(obs), value)
    assert not torch.equal(fp32_value, fp32_value.bfloat16().float())


# ---------------------------------------------------------------- the Atari fixed-seed run


@pytest.mark.slow
def test_bf16_fixed_seed_run_is_deterministic_and_close_to_float32(tmp_path):
    first = logged_losses(SCRIPTS["ppo_atari"], tmp_path / "first", flags=("--bf16",))
    second = logged_losses(SCRIPTS["ppo_atari"], tmp_path / "second", flags=("--bf16",))
    assert first == second  # bit for bit on one machine
    assert finite(first)
    float32 = json.loads(FIXTURE.read_text())["ppo_atari"]  # this run without --bf16
    found = differences(first, float32)
    assert max(found.values()) <= BOUND, found
    # more than other CPUs' float32 differs: the flag changed the computation
    assert sum(d > TOLERANCE for d in found.values()) >= 3, found
    assert first["charts/learning_rate"] == float32["charts/learning_rate"]


# ---------------------------------------------------------------- checkpoint, saved model, eval, resume


def atari_run(tmp_path: Path, iterations: int, *flags: str) -> list[str]:
    """The multi-GPU script as one process, the fixed-seed run named `run`, to `iterations` iterations."""
    return [
        SCRIPTS["ppo_atari_multigpu"],
        *RUN,
        "--seed",
        str(SEED),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-name",
        "run",
        "--total-timesteps",
        str(iterations * BATCH),
        *flags,
    ]


# `python -c SNAPSHOT FROM TO`: a copy of the run's folder as a run left it (the next run changes it)
SNAPSHOT = "import shutil, sys; shutil.copytree(*sys.argv[1:])"


def checkpoint(run_dir: Path, iteration: int, bf16: bool) -> None:
    """The run's checkpoint is at `iteration`, of a run with `bf16`, and holds float32 tensors only."""
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (ckpt["iteration"], ckpt["settings"]["bf16"]) == (iteration, bf16)
    assert ckpt["state"]["optimizer"]["state"], "no optimizer state saved"
    assert floating_dtypes(ckpt["state"]) == {torch.float32}  # the agent and Adam's moments


@pytest.mark.slow
def test_bf16_checkpoint_and_model_are_float32_evaluate_and_resume_either_way(tmp_path):
    """On the multi-GPU script (tests above and in test_host_syncs.py run ppo_atari.py's --bf16 too): a bf16 run; the
    stop hint's resume, no flag typed; then, where a resume may change --bf16, that run resumed in float32 and that
    float32 run resumed in bf16. One forked child each (see `run_each`), each followed by a snapshot of the run."""
    runs = [atari_run(tmp_path, 1, "--bf16", "--save-model"), atari_run(tmp_path, 2, "--resume")]
    if "bf16" in MAY_CHANGE_ON_RESUME:
        runs += [atari_run(tmp_path, 3, "--resume", "--no-bf16"), atari_run(tmp_path, 4, "--resume", "--bf16")]
    cases = []
    for i, args in enumerate(runs, start=1):
        cases += [
            (args, tmp_path),
            (["-c", SNAPSHOT, str(tmp_path / "runs" / "run"), str(tmp_path / f"after{i}")], tmp_path),
        ]
    results = run_each(cases, env=FAST, timeout=600, train=True)
    for result in results:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    outputs = [result.stdout for result in results[::2]]

    checkpoint(tmp_path / "after1", 1, bf16=True)
    model_path = tmp_path / "after1" / "ppo_atari_multigpu.cleanrl_model"
    assert floating_dtypes(torch.load(model_path, weights_only=True)["model"]) == {torch.float32}
    # the eval builds a float32 Agent: the weights load as they are, and a game is played to its end
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the runs: on 2 busy cores a second thread makes the game 7 times slower
    try:
        assert len(evaluate(str(model_path), eval_episodes=1, seed=1)) == 1
    finally:
        torch.set_num_threads(threads)

    # the stop hint's resume, no flag typed: the run continues in bf16, its stored setting
    output = outputs[1]
    assert "resuming from iteration 1" in output and "note: resuming with --total-timesteps 256" in output, output
    assert "bf16" not in "".join(line for line in output.splitlines() if line.startswith("note: resuming")), output
    checkpoint(tmp_path / "after2", 2, bf16=True)

    if "bf16" not in MAY_CHANGE_ON_RESUME:
        pytest.skip(
            "the rest needs --bf16 among the settings a resume may change (cleanrl_utils/resume.py "
            "MAY_CHANGE_ON_RESUME); without it a resume refuses --no-bf16 and --bf16"
        )
    # a bf16 run resumed in float32, then that float32 run resumed in bf16
    assert "note: resuming with --no-bf16 (the run has --bf16)" in outputs[2], outputs[2]
    checkpoint(tmp_path / "after3", 3, bf16=False)
    assert "note: resuming with --bf16 (the run has --no-bf16)" in outputs[3], outputs[3]
    checkpoint(tmp_path / "after4", 4, bf16=True)


# ---------------------------------------------------------------- ppo.py


def classic_run(tmp_path: Path, name: str, *flags: str) -> tuple[list[str], Path]:
    """ppo.py's fixed-seed run (seed 3, 2 envs x 64 steps, 4 iterations) into tmp_path / name: its command line."""
    runs = tmp_path / name
    args = ["cleanrl/ppo.py", "--seed", "3", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512"]
    return [*args, "--runs-dir", str(runs), *flags], runs


def classic_losses(runs: Path, result) -> tuple[Path, Losses]:
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = find_run_dir(runs)
    return run_dir, {tag: [[step, value] for step, value in read_scalars(run_dir, tag)] for tag in LOSS_TAGS}


@pytest.mark.slow
def test_classic_bf16_run_trains_saves_float32_and_evaluates(tmp_path):
    (bf16_args, bf16_runs), (float32_args, float32_runs) = (
        classic_run(tmp_path, "bf16", "--bf16", "--save-model"),
        classic_run(tmp_path, "float32"),
    )
    results = run_each([(bf16_args, tmp_path), (float32_args, tmp_path)], env=FAST, train=True)  # see `run_each`
    run_dir, bf16 = classic_losses(bf16_runs, results[0])
    _, float32 = classic_losses(float32_runs, results[1])
    assert finite(bf16) and [step for step, _ in bf16["losses/value_loss"]] == [128, 256, 384, 512]
    found = differences(bf16, float32)
    assert bf16 != float32 and max(found.values()) <= BOUND, found
    model_path = run_dir / "ppo.cleanrl_model"
    assert floating_dtypes(torch.load(model_path, weights_only=True)["model"]) == {torch.float32}
    assert len(evaluate(str(model_path), eval_episodes=2, seed=1)) == 2
