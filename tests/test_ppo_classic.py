"""cleanrl/ppo.py: it learns CartPole, GAE, SAME_STEP episode statistics, repeatability, saving, stopping, bad input
(stop and resume: tests/test_ppo_classic_resume.py)."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    FAST,
    CHART_TAGS,
    FIRST_ON_PATH,
    LOSS_TAGS,
    assert_one_line_error,
    find_run_dir,
    load_script,
    read_scalars,
    run_each,
    run_on_terminal_until,
    run_script,
)

SCRIPT = "cleanrl/ppo.py"

ppo = load_script(SCRIPT, "ppo_under_test")


# ---------------------------------------------------------------- learning test

# CleanRL's defaults, as the script has them. Measured at 100k steps (mean return of the last 20 episodes):
# seeds 1-6 gave 304, 229, 204, 290, 226, 255; seed 1 leaves the widest margin.
LEARNING_ARGS = ["--seed", "1", "--total-timesteps", "100000"]


@pytest.fixture(scope="module")
def second_core():
    """Runs the short subprocesses of this file one at a time, in the background. The learning run uses one thread
    (OMP_NUM_THREADS=1), so on 2 cores they take no extra wall time when started next to it."""
    pool = ThreadPoolExecutor(max_workers=1)
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
def test_learns_cartpole_within_100k_steps(tmp_path, bad_input_runs, short_runs):
    # bad_input_runs and short_runs are requested here only to start them on the second core meanwhile
    start = time.monotonic()
    result = run_script(
        [SCRIPT, *LEARNING_ARGS, "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, timeout=1800, env=FAST
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = find_run_dir(tmp_path / "runs")
    returns = read_scalars(run_dir, "charts/episodic_return")
    last_20 = [value for _, value in returns[-20:]]
    mean_last_20 = float(np.mean(last_20))
    print(f"learning test: {elapsed:.0f}s, {len(returns)} episodes, mean return of the last 20: {mean_last_20:.1f}")
    assert len(last_20) == 20
    assert max(step for step, _ in returns) <= 100_000
    assert mean_last_20 >= 195, f"mean return of the last 20 episodes {mean_last_20:.1f} < 195"
    # CartPole pays 1 per step: every logged episode's return equals its length (both from the SAME_STEP stats)
    lengths = [value for _, value in read_scalars(run_dir, "charts/episodic_length")]
    assert lengths == [value for _, value in returns]
    for tag in LOSS_TAGS + CHART_TAGS:
        assert read_scalars(run_dir, tag), f"{tag} not logged"


# ---------------------------------------------------------------- GAE, against definitions independent of its loop


def random_rollout(num_steps=12, num_envs=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.rand(num_steps, num_envs, generator=g)
    values = torch.rand(num_steps, num_envs, generator=g)
    dones = (torch.rand(num_steps, num_envs, generator=g) < 0.25).float()
    next_value = torch.rand(1, num_envs, generator=g)
    next_done = torch.tensor([0.0, 1.0, 0.0])
    return rewards, values, dones, next_value, next_done


def test_gae_with_lambda_1_gives_discounted_returns_within_each_episode():
    rewards, values, dones, next_value, next_done = random_rollout()
    gamma = 0.9
    _, returns = ppo.compute_gae(rewards, values, dones, next_value, next_done, gamma, 1.0)
    num_steps, num_envs = rewards.shape
    all_dones = torch.cat([dones, next_done.unsqueeze(0)])  # all_dones[t + 1]: step t ended its episode
    for env in range(num_envs):
        for t in range(num_steps):
            expected, discount = 0.0, 1.0
            for k in range(t, num_steps):
                expected += discount * rewards[k, env].item()
                discount *= gamma
                if all_dones[k + 1, env]:
                    break
            else:  # the episode goes on past the rollout: bootstrap from the value of the next observation
                expected += discount * next_value[0, env].item()
            assert returns[t, env].item() == pytest.approx(expected, rel=1e-5)


def test_gae_with_lambda_0_is_the_one_step_td_error():
    rewards, values, dones, next_value, next_done = random_rollout(seed=1)
    gamma = 0.97
    advantages, _ = ppo.compute_gae(rewards, values, dones, next_value, next_done, gamma, 0.0)
    next_values = torch.cat([values[1:], next_value])
    not_ended = 1.0 - torch.cat([dones[1:], next_done.unsqueeze(0)])
    torch.testing.assert_close(advantages, rewards + gamma * next_values * not_ended - values)


# ---------------------------------------------------------------- episode statistics with SAME_STEP autoreset

EPISODE_LEN = 3


class CountingEnv(gym.Env):
    """Observation = step index within the episode; reward = the action; terminates after EPISODE_LEN steps."""

    observation_space = gym.spaces.Box(0, EPISODE_LEN, (1,), np.float32)
    action_space = gym.spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), float(action), self.t == EPISODE_LEN, False, {}


gym.register("PPOClassicTestCounting-v0", entry_point=CountingEnv)


@pytest.mark.parametrize("vector_env", ["sync", "async"])
def test_same_step_episode_stats_and_reset_observations(vector_env):
    num_envs = 2
    args = ppo.Args(env_id="PPOClassicTestCounting-v0", num_envs=num_envs, vector_env=vector_env)
    envs = ppo.make_vector_env(args, "test")
    try:
        assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
        envs.reset(seed=0)
        actions = np.arange(1, num_envs + 1)  # env i always takes action i + 1, so its returns tell it apart
        for step in range(1, 4 * EPISODE_LEN + 1):
            next_obs, _, terminations, _, infos = envs.step(actions)
            episode_ended = step % EPISODE_LEN == 0
            assert terminations.tolist() == [episode_ended] * num_envs
            # the step that ends an episode already returns the next episode's first observation
            assert next_obs[:, 0].tolist() == [step % EPISODE_LEN] * num_envs
            if episode_ended:
                assert infos["_episode"].tolist() == [True] * num_envs
                assert infos["episode"]["r"].tolist() == (actions * EPISODE_LEN).tolist()
                assert infos["episode"]["l"].tolist() == [EPISODE_LEN] * num_envs
            else:
                assert "_episode" not in infos
    finally:
        envs.close()


# ---------------------------------------------------------------- short runs: repeatability, saving, scalars


def short_run(tmp_path, name, *extra):
    runs = tmp_path / name
    result = run_script(
        [SCRIPT, "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512", "--runs-dir", str(runs), *extra],
        cwd=tmp_path,
        timeout=300,
        env=FAST,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return find_run_dir(runs), result


@pytest.fixture(scope="module")
def short_runs(second_core, tmp_path_factory):
    """Three short runs (stdout on a pipe): seed 1 saving its model, seed 1 again, seed 2; as futures."""
    tmp_path = tmp_path_factory.mktemp("short_runs")
    return {
        "first": second_core.submit(short_run, tmp_path, "first", "--seed", "1", "--save-model"),
        "again": second_core.submit(short_run, tmp_path, "again", "--seed", "1"),
        # 600 steps do not fill whole batches of 128: it runs 512 and says so
        "other": second_core.submit(
            short_run, tmp_path, "other", "--seed", "2", "--no-cuda", "--total-timesteps", "600"
        ),
    }


@pytest.mark.slow
def test_same_seed_logs_identical_losses(short_runs):
    runs = {name: future.result()[0] for name, future in short_runs.items()}
    losses = {name: [read_scalars(run, tag) for tag in LOSS_TAGS] for name, run in runs.items()}
    assert all(losses["first"]), "a loss was not logged"
    assert [step for step, _ in losses["first"][0]] == [128, 256, 384, 512]
    assert losses["first"] == losses["again"]
    assert losses["first"] != losses["other"]  # the check can fail: another seed gives other losses


@pytest.mark.slow
def test_no_progress_bar_when_stdout_is_not_a_terminal(short_runs):
    _, result = short_runs["again"].result()
    assert "SPS=" not in result.stdout + result.stderr and "\r" not in result.stdout + result.stderr
    # plain lines instead, as the Atari scripts print them: after the first iteration, then every 30 s, at the end
    progress = [line for line in result.stdout.splitlines() if line.startswith("global_step=")]
    assert progress[0].startswith("global_step=128/512 (25%), SPS: ") and progress[-1].startswith("global_step=512/512")
    assert len(progress) < 4  # not one per iteration (the 4 iterations take far less than 30 s)


@pytest.mark.slow
def test_first_line_names_the_run_the_device_and_the_sizes(short_runs):
    run, result = short_runs["again"].result()
    first = result.stdout.splitlines()[0]
    device = "cpu (no CUDA device found: runs on CPU)" if not torch.cuda.is_available() else "cuda ("
    assert first.startswith(f"run {run.name}: 2 envs (sync), batch 128, minibatch 32, 4 iterations, device {device}"), (
        first
    )
    assert first.endswith(f"logs in {run}") or "cuda (" in first, first
    assert "note:" not in result.stdout  # 512 steps are 4 whole batches
    _, other = short_runs["other"].result()  # --no-cuda: the plain device name
    assert ", device cpu, logs in " in other.stdout.splitlines()[0]
    assert other.stdout.splitlines()[1] == (
        "note: --total-timesteps 600 is not a multiple of the batch (128): runs 512 steps"
    )


@pytest.mark.slow
def test_short_run_logs_every_scalar_and_anneals_the_learning_rate(short_runs):
    run, _ = short_runs["first"].result()
    assert run.name.startswith("CartPole-v1__ppo__1__")
    for tag in LOSS_TAGS + CHART_TAGS:
        assert read_scalars(run, tag), f"{tag} not logged"
    lr = [value for _, value in read_scalars(run, "charts/learning_rate")]
    assert lr[0] == pytest.approx(2.5e-4) and lr == sorted(lr, reverse=True) and lr[-1] < lr[0]


@pytest.mark.slow
def test_save_model_writes_weights_that_load_into_the_agent(short_runs):
    model_path = short_runs["first"].result()[0] / "ppo.cleanrl_model"
    assert model_path.is_file()
    assert not (short_runs["again"].result()[0] / "ppo.cleanrl_model").exists()  # only with --save-model
    saved = torch.load(model_path, weights_only=True)
    assert saved["env_id"] == "CartPole-v1" and saved["exp_name"] == "ppo"
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = ppo.Agent(envs)
    agent.load_state_dict(saved["model"])  # strict: every weight present, with the right shape
    assert not torch.equal(agent.actor[-1].weight, ppo.Agent(envs).actor[-1].weight)
    envs.close()


@pytest.mark.slow
def test_the_saved_model_is_evaluated_by_the_eval_cli(short_runs, tmp_path):
    model_path = short_runs["first"].result()[0] / "ppo.cleanrl_model"
    result = run_script(
        ["-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(model_path), "--eval-episodes", "2", "--no-cuda"],
        cwd=tmp_path,
        timeout=120,
        env=FAST,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("eval episode") == 2 and "2 episodes: mean return" in result.stdout, result.stdout
    assert "note:" not in result.stdout  # --no-cuda: no note that CUDA is missing


# ---------------------------------------------------------------- on a terminal, stopped with SIGTERM


@pytest.mark.slow
def test_progress_bar_on_a_terminal_and_sigterm_keeps_logs_checkpoint_and_model(tmp_path):
    returncode, output = run_on_terminal_until(
        [
            SCRIPT,
            "--num-envs",
            "2",
            "--num-steps",
            "64",
            "--total-timesteps",
            "10000000",
            "--save-model",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        until="ret=",
        timeout=240,
        env=FAST,
    )
    assert returncode == 128 + signal.SIGTERM, output[-2000:]  # after the iteration it was in, with a checkpoint
    assert "SPS=" in output and "ret=" in output and "ETA=" in output, output[-2000:]  # tqdm bar, postfix
    assert "step/s" not in output, output[-2000:]  # one rate and one ETA: not tqdm's too
    assert "stopped at global step" in output and "Traceback" not in output, output[-2000:]
    assert "; resume with: " in output and "--resume --run-name CartPole-v1__ppo__1__" in output, output[-2000:]
    run_dir = find_run_dir(tmp_path / "runs")
    assert (run_dir / "ppo.cleanrl_model").is_file() and (run_dir / "checkpoint.pt").is_file()
    assert read_scalars(run_dir, "losses/value_loss")  # the writer was closed: its events are on disk


# ---------------------------------------------------------------- bad input: one line, no traceback, nothing written

BAD_INPUT = {
    "unknown env id": (["--env-id", "CartPol-v1"], "did you mean CartPole-v1"),
    "an Atari game": (["--env-id", "BreakoutNoFrameskip-v4"], "is an Atari game; use cleanrl/ppo_atari.py"),
    "continuous actions": (["--env-id", "Pendulum-v1"], "Box action space"),
    "discrete observations": (["--env-id", "FrozenLake-v1"], "Discrete observation space"),
    "missing env package": (["--env-id", "LunarLander-v3"], "needs a package that is not installed"),
    "zero envs": (["--num-envs", "0"], "--num-envs must be positive"),
    "negative steps": (["--num-steps", "-1"], "--num-steps must be positive"),
    "zero minibatches": (["--num-minibatches", "0"], "--num-minibatches must be positive"),
    "zero epochs": (["--update-epochs", "0"], "--update-epochs must be positive"),
    "zero timesteps": (["--total-timesteps", "0"], "--total-timesteps must be positive"),
    "batch not divisible": (["--num-minibatches", "3"], "not divisible by --num-minibatches 3"),
    "less than one batch": (["--total-timesteps", "100"], "smaller than one batch"),
    "1e2 as users type it": (["--total-timesteps", "1e2"], "--total-timesteps 100 is smaller than one batch"),
    "a fraction of a step": (["--total-timesteps", "1e-3"], "'1e-3' is not a whole number"),
    "not a count": (["--total-timesteps", "1.5"], "'1.5' is not a whole number"),
    "a seed that is not a number": (["--seed", "one"], "'one' is not a number"),
    "unwritable run dir": (["--runs-dir", "/etc/hostname/runs"], "cannot write the run directory"),
    "video without moviepy": (["--capture-video"], "needs moviepy: pip install -e '.[video]'"),
    "video without pygame": (["--capture-video"], "cannot draw frames (pygame is not installed"),
    "track without wandb": (["--track"], "needs wandb: pip install -e '.[track]'"),
}
# Optional packages may or may not be installed here: these cases put stand-ins first on the path, a module that
# fails to import for a missing package and an empty one for a present package.
MISSING = "raise ImportError('hidden by the test')\n"
FAKE_MODULES = {
    "missing env package": {"Box2D": MISSING},
    "video without moviepy": {"moviepy": MISSING},
    "video without pygame": {"moviepy": "", "pygame": MISSING},
    "track without wandb": {"wandb": MISSING},
}


@pytest.fixture(scope="module")
def bad_input_runs(second_core, tmp_path_factory):
    """Every bad-input case as {case: (its working directory, its completed process)}, as a future; the cases run
    one after the other in processes forked from one that imported the script's libraries (run_each)."""
    tmp_path = tmp_path_factory.mktemp("bad_input")

    def job(case):
        cwd = tmp_path / case.replace(" ", "_")
        fake = cwd / "fake_modules"
        fake.mkdir(parents=True)
        for name, source in FAKE_MODULES.get(case, {}).items():
            (fake / f"{name}.py").write_text(source)
        argv, _ = BAD_INPUT[case]
        runs_dir = [] if "--runs-dir" in argv else ["--runs-dir", str(cwd / "runs")]
        return ["-c", FIRST_ON_PATH, str(fake), SCRIPT, *argv, *runs_dir], cwd

    def run_all():
        cases = [job(case) for case in BAD_INPUT]
        results = run_each(cases, env=FAST, timeout=600)
        return {case: (cwd, result) for case, (_, cwd), result in zip(BAD_INPUT, cases, results)}

    return second_core.submit(run_all)


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_a_one_line_error(bad_input_runs, case):
    cwd, result = bad_input_runs.result()[case]
    assert_one_line_error(result, BAD_INPUT[case][1])
    # stopped before any work: no run directory, no video folder
    assert not (cwd / "runs").exists() and not (cwd / "videos").exists()
