"""cleanrl_utils/evals/ppo_eval.py with a network of the user's own, and the OpenMP thread policy of every
cleanrl_utils entry point that imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn as nn
from helpers import REPO_ROOT

import gymnasium as gym
from helpers import load_script

from cleanrl_utils.atari_wrappers import make_atari_env
from cleanrl_utils.checkpoint import rng_state, save_checkpoint
from cleanrl_utils.evals.ppo_eval import evaluate, pick_device

LEFT = 3  # Breakout's actions: NOOP, FIRE, RIGHT, LEFT


class TinyAgent(nn.Module):
    """A network of the kind a user writes into a copied script: not the Nature CNN, CleanRL's interface."""

    def __init__(self, envs):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.actor = nn.Linear(4 * 4 * 4, envs.single_action_space.n)
        nn.init.zeros_(self.actor.weight)
        nn.init.zeros_(self.actor.bias)
        self.steps = 0

    def get_action_and_value(self, x, action=None):
        self.steps += 1
        logits = self.actor(self.pool(x.float() / 255.0).flatten(1))
        return logits.argmax(dim=1), None, None, None


def test_evaluate_takes_the_users_model_class(tmp_path):
    env = make_atari_env("BreakoutNoFrameskip-v4")
    env.single_action_space = env.action_space
    trained = TinyAgent(env)
    with torch.no_grad():
        trained.actor.bias[LEFT] = 10.0  # the saved weights always choose LEFT; a fresh TinyAgent chooses NOOP
    path = tmp_path / "tiny.cleanrl_model"
    torch.save({"model": trained.state_dict(), "env_id": "BreakoutNoFrameskip-v4"}, path)

    built = []

    def model(envs):
        built.append(TinyAgent(envs))
        return built[-1]

    returns = evaluate(str(path), eval_episodes=1, seed=3, Model=model)

    # the same game played by hand with LEFT on every step: same score, same number of agent steps
    score, steps = 0.0, 0
    obs, _ = env.reset(seed=3)
    while True:
        obs, _, terminated, truncated, info = env.step(LEFT)
        steps += 1
        if terminated or truncated:
            if "episode" in info:
                score = float(info["episode"]["r"])
                break
            obs, _ = env.reset()
    env.close()
    assert returns == [score]
    assert len(built) == 1 and built[0].steps == steps  # one decision of the user's network per agent step


def test_greedy_needs_the_logits_of_the_users_model(tmp_path):
    env = make_atari_env("BreakoutNoFrameskip-v4")
    env.single_action_space = env.action_space
    path = tmp_path / "tiny.cleanrl_model"
    torch.save({"model": TinyAgent(env).state_dict(), "env_id": "BreakoutNoFrameskip-v4"}, path)
    env.close()
    with pytest.raises(SystemExit, match="^error: --greedy needs the model's logits"):
        evaluate(str(path), eval_episodes=1, greedy=True, Model=TinyAgent)


# ---------------------------------------------------------------- the model kinds: classic control, checkpoint.pt

PUSH_LEFT = 0  # CartPole's actions: push left, push right


def test_a_classic_control_model_is_evaluated_on_its_env(tmp_path):
    """A `cleanrl/ppo.py --save-model` file: ppo.py's Agent on plain CartPole, episodes as played by hand."""
    ppo = load_script("cleanrl/ppo.py", "ppo_for_eval")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = ppo.Agent(envs)
    envs.close()
    with torch.no_grad():
        agent.actor[-1].bias[PUSH_LEFT] = 50.0  # always pushes left (a fresh Agent picks at random)
    path = tmp_path / "ppo.cleanrl_model"
    torch.save({"model": agent.state_dict(), "env_id": "CartPole-v1", "exp_name": "ppo"}, path)

    env = gym.make("CartPole-v1")
    by_hand = []
    env.reset(seed=3)
    for _ in range(2):
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(PUSH_LEFT)
            steps, done = steps + 1, terminated or truncated
        by_hand.append(float(steps))  # CartPole pays 1 per step
        env.reset()
    env.close()
    assert evaluate(str(path), eval_episodes=2, seed=3) == by_hand
    assert evaluate(str(path), eval_episodes=2, seed=3, greedy=True) == by_hand  # logits from actor(obs)
    assert all(steps < 50 for steps in by_hand)  # not a full 500-step episode: the policy really steered


def test_a_runs_checkpoint_is_evaluated_like_a_saved_model(tmp_path, capsys):
    """The `checkpoint.pt` an Atari run writes without --save-model (model, optimizer, RNG states, ...)."""
    ppo_atari = load_script("cleanrl/ppo_atari.py", "ppo_atari_for_eval")
    env = make_atari_env("BreakoutNoFrameskip-v4")
    env.single_action_space, env.single_observation_space = env.action_space, env.observation_space
    agent = ppo_atari.Agent(env)
    env.close()
    optimizer = torch.optim.Adam(agent.parameters())
    args = ppo_atari.Args(batch_size=1024, num_iterations=2)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(
        str(path), {"agent": agent, "optimizer": optimizer}, args, 1, 1024, [rng_state(torch.device("cpu"))], []
    )
    torch.save({"model": agent.state_dict(), "env_id": args.env_id}, tmp_path / "same.cleanrl_model")
    from_checkpoint = evaluate(str(path), eval_episodes=1, seed=2)
    assert len(from_checkpoint) == 1
    assert from_checkpoint == evaluate(str(tmp_path / "same.cleanrl_model"), eval_episodes=1, seed=2)


def test_a_missing_or_foreign_file_is_one_line_naming_both_kinds(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: no model file .*--save-model or a run's checkpoint\.pt$"):
        evaluate(str(tmp_path / "missing.cleanrl_model"))
    torch.save({"weights": {}}, tmp_path / "foreign.pt")
    with pytest.raises(SystemExit, match=r"^error: .* holds no model; .*checkpoint\.pt$"):
        evaluate(str(tmp_path / "foreign.pt"))


def test_cuda_flag_falls_back_to_cpu_with_a_note(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(True) == torch.device("cpu")
    assert capsys.readouterr().out == "note: no CUDA device found; evaluating on CPU (--no-cuda skips this note)\n"
    assert pick_device(False) == torch.device("cpu") and capsys.readouterr().out == ""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device(True) == torch.device("cuda") and capsys.readouterr().out == ""
    assert pick_device(False) == torch.device("cpu")


# ---------------------------------------------------------------- OpenMP thread policy of the entry points

# Runs an entry point with --help and prints OMP_WAIT_POLICY at the moment torch is first imported, then ends there
# (what follows cannot change it: torch's OpenMP reads it as it loads); "no-torch" if the program never imports it.
WATCH = """
import importlib.abc, os, runpy, sys
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("@@policy", os.environ.get("OMP_WAIT_POLICY", "unset"), flush=True)
            os._exit(0)
sys.meta_path.insert(0, Watch())
how, what = sys.argv[1:3]
sys.argv = [what, "--help"]
try:
    if how == "-m":
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(what, run_name="__main__")
finally:  # (--help ends in SystemExit)
    print("@@policy no-torch")
"""


def entry_points() -> list[str]:
    """Every training script (cleanrl/), module of cleanrl_utils and of the lab (benchmark/lab/) that runs as a program
    (has a `__main__` block)."""
    found = []
    folders = [REPO_ROOT / "cleanrl", REPO_ROOT / "cleanrl_utils", REPO_ROOT / "benchmark" / "lab"]
    for path in sorted(path for folder in folders for path in folder.rglob("*.py")):
        if 'if __name__ == "__main__":' in path.read_text():
            found.append(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
    return found


def policy_when_torch_loads(how: str, what: str, env: dict[str, str]) -> str:
    res = subprocess.run(
        [sys.executable, "-c", WATCH, how, what], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split("@@policy")[-1].strip()


@pytest.mark.slow
def test_every_entry_point_sets_the_thread_policy_before_torch_loads():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    modules = entry_points()
    expected = {
        "cleanrl.ppo_atari",
        "cleanrl_utils.evals.ppo_eval",
        "benchmark.lab.throughput",
        "cleanrl_utils.benchmark",
    }
    assert expected <= set(modules)
    runs = [("-m", m, env) for m in modules]
    runs += [("path", str(REPO_ROOT / (m.replace(".", "/") + ".py")), env) for m in modules]
    for how, what in (("-m", "cleanrl_utils.evals.ppo_eval"), ("path", str(REPO_ROOT / "cleanrl" / "ppo_atari.py"))):
        runs.append((how, what, dict(env, OMP_WAIT_POLICY="ACTIVE")))  # the user's choice
    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(lambda run: policy_when_torch_loads(*run), runs))
    results = {(how, what, run_env.get("OMP_WAIT_POLICY")): s for (how, what, run_env), s in zip(runs, seen)}
    assert results.pop(("-m", "cleanrl_utils.evals.ppo_eval", "ACTIVE")) == "ACTIVE"
    assert results.pop(("path", str(REPO_ROOT / "cleanrl" / "ppo_atari.py"), "ACTIVE")) == "ACTIVE"
    loads_torch = {what for (how, what, _), s in results.items() if s != "no-torch"}
    assert {
        "cleanrl.ppo_atari",
        "cleanrl_utils.evals.ppo_eval",
        "benchmark.lab.throughput",
    } <= loads_torch  # not vacuous
    assert {key: s for key, s in results.items() if s != "no-torch"} == {
        key: "PASSIVE" for key, s in results.items() if s != "no-torch"
    }


# ---------------------------------------------------------------- damaged files, --bf16 models


def test_a_model_file_cut_short_or_changed_is_named_damaged(tmp_path):
    """torch's files are zip archives: one that starts as such but does not load is damaged, not "another kind"."""
    ppo = load_script("cleanrl/ppo.py", "ppo_for_damage")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    path = tmp_path / "ppo.cleanrl_model"
    torch.save({"model": ppo.Agent(envs).state_dict(), "env_id": "CartPole-v1"}, path)
    envs.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        SystemExit, match=r"^error: the model file .* is damaged \(cut short or changed: .*\); save, copy"
    ):
        evaluate(str(path))
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(
        SystemExit, match=r"^error: cannot read the model file .*; is it a \.cleanrl_model or checkpoint"
    ):
        evaluate(str(tmp_path / "notes.txt"))


@pytest.mark.slow
def test_a_bf16_model_plays_as_it_trained(tmp_path, capsys):
    """`--bf16 --save-model`: the file says so, and the evaluation runs the network under bfloat16 autocast as the
    run did (it used to play in float32 without a word); a network without the switch plays in float32, said so."""
    from helpers import run_script

    res = run_script(
        ["cleanrl/ppo.py", "--bf16", "--save-model", "--total-timesteps", "512", "--no-progress-bar"], tmp_path, 300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    ppo = load_script("cleanrl/ppo.py", "ppo_for_bf16")
    built = []

    def model(envs):
        built.append(ppo.Agent(envs))
        return built[-1]

    for path in (run_dir / "ppo.cleanrl_model", run_dir / "checkpoint.pt"):
        evaluate(str(path), eval_episodes=1, Model=model)
        assert built[-1].bf16 is True
        assert (
            f"note: {path} was trained with --bf16: its network plays under bfloat16 autocast"
            in capsys.readouterr().out
        )

    class Float32Only(nn.Module):
        def __init__(self, envs):
            super().__init__()
            self.inner = ppo.Agent(envs)

        def get_action_and_value(self, x, action=None):
            return self.inner.get_action_and_value(x, action)

    weights = torch.load(run_dir / "ppo.cleanrl_model", weights_only=True)
    weights["model"] = {f"inner.{k}": v for k, v in weights["model"].items()}
    torch.save(weights, tmp_path / "wrapped.cleanrl_model")
    evaluate(str(tmp_path / "wrapped.cleanrl_model"), eval_episodes=1, Model=Float32Only)
    assert "trained with --bf16, but Float32Only has no bf16 switch: it plays in float32" in capsys.readouterr().out
