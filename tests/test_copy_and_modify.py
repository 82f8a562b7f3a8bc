"""Copy ppo_atari.py and change it, as a CleanRL user does: an RND-style intrinsic reward (a random target network,
a predictor trained to match it, a running normaliser of its error), added in a few lines. The copy must run, stop
on SIGTERM with a checkpoint, resume, and get its extra network, optimizer and normaliser back; its device-side
reward must cost no host sync per rollout step; and a copy that forgets to save the new network must be told so at
its first checkpoint, not lose it silently on a resume.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import FAST, REPO_ROOT, TINY_ATARI, assert_one_line_error, run_script, start_script, wait_for, run_each

SCRIPT = REPO_ROOT / "cleanrl" / "ppo_atari.py"
RUN = TINY_ATARI

# (where, what is added after it): the whole change, 28 lines
EDITS = [
    (
        "        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)\n",
        '''

class RND(nn.Module):
    """Random network distillation: the predictor's error on a frame is its novelty."""

    def __init__(self):
        super().__init__()
        self.target = nn.Sequential(nn.Flatten(), nn.Linear(84 * 84, 16)).requires_grad_(False)
        self.predictor = nn.Sequential(nn.Flatten(), nn.Linear(84 * 84, 16))

    def forward(self, x):
        x = x[:, -1].float() / 255.0
        return (self.target(x) - self.predictor(x)).pow(2).mean(1)
''',
    ),
    (
        '    state = {"agent": agent, "optimizer": optimizer}\n',
        """    rnd = RND().to(device)
    rnd_optimizer = optim.Adam(rnd.predictor.parameters(), lr=1e-3)
    novelty_scale = torch.ones(1, device=device)  # a running mean of the novelty, to normalise it
    state.update(rnd=rnd, rnd_optimizer=rnd_optimizer, novelty_scale=novelty_scale)
""",
    ),
    (
        "        start_iteration, global_step, recent_returns = load_state(state, ckpt)\n",
        """        print(f"restored rnd {rnd.predictor[1].weight.sum().item():.6f} scale {novelty_scale.item():.6f}")
""",
    ),
    (
        "            rewards[step] = host_reward.to(device, non_blocking=True)\n",
        """            with torch.no_grad():
                novelty = rnd(next_obs)
            novelty_scale.mul_(0.99).add_(0.01 * novelty.mean())
            rewards[step] += 0.1 * novelty / novelty_scale
""",
    ),
    (
        "        y_pred, y_true = torch.stack([b_values, b_returns]).cpu().numpy()\n",
        """        rnd_optimizer.zero_grad()
        rnd(b_obs).mean().backward()
        rnd_optimizer.step()
""",
    ),
]


def copy_with_rnd(tmp_path: Path, save_rnd: bool = True) -> Path:
    source = SCRIPT.read_text()
    for where, added in EDITS:
        assert source.count(where) == 1, f"the line this copy edits after has changed: {where!r}"
        source = source.replace(where, where + added)
    if not save_rnd:  # the mistake: the new network and its optimizer are left out of the checkpoint
        source = source.replace(
            "state.update(rnd=rnd, rnd_optimizer=rnd_optimizer, novelty_scale=novelty_scale)",
            "state.update(rnd_optimizer=rnd_optimizer)",
        )
    copy = tmp_path / "ppo_atari_rnd.py"
    copy.write_text(source)
    return copy


@pytest.mark.slow
def test_a_copy_with_an_intrinsic_reward_stops_and_resumes_with_its_extra_state(tmp_path):
    copy = copy_with_rnd(tmp_path)
    common = [str(copy), *RUN, "--total-timesteps", "4096", "--runs-dir", str(tmp_path / "runs"), "--run-name", "rnd"]
    log = tmp_path / "first.log"
    proc = start_script(common + ["--checkpoint-interval", "1"], tmp_path, log, env=FAST)
    try:
        wait_for(log, "checkpoint: iteration 2,", proc, timeout=300)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    ckpt = torch.load(tmp_path / "runs" / "rnd" / "checkpoint.pt", weights_only=True)
    assert set(ckpt["state"]) == {"agent", "optimizer", "rnd", "rnd_optimizer", "novelty_scale"}
    saved_weight = float(ckpt["state"]["rnd"]["predictor.1.weight"].sum())
    saved_scale = float(ckpt["state"]["novelty_scale"])
    assert saved_scale != 1.0  # the normaliser moved during the run
    assert ckpt["state"]["rnd_optimizer"]["state"]  # Adam's moments of the predictor

    # one iteration more than the checkpoint's: what is checked is printed as the resume starts
    more = ["--total-timesteps", str(ckpt["global_step"] + 64)]
    result = run_script(common + ["--resume", *more], cwd=tmp_path, timeout=300, env=FAST)
    assert result.returncode == 0, result.stderr[-3000:]
    restored = re.search(r"restored rnd (\S+) scale (\S+)", result.stdout)
    assert restored, result.stdout[-2000:]
    # the sum of 112,896 weights rounds differently with the script's 1 torch thread than with this process's
    # threads (last bits), so it is compared to far below what one step of the predictor moves it (about 5)
    assert float(restored[1]) == pytest.approx(saved_weight, abs=1e-4), restored[0]
    assert restored[2] == f"{saved_scale:.6f}", restored[0]


def copy_with_shared_optimizer(tmp_path: Path) -> Path:
    """CleanRL's own form of the change (its ppo_rnd_envpool.py): the agent's one optimizer also steps the predictor,
    and `state` is left as it is; the RND class is the one of EDITS."""
    source = SCRIPT.read_text()
    for where, added in (EDITS[0], PREDICTOR_STEP, (OPTIMIZER_LINE, None)):
        assert source.count(where) == 1, f"the line this copy edits has changed: {where!r}"
        source = source.replace(where, SHARED_OPTIMIZER if added is None else where + added)
    assert source.count('state = {"agent": agent, "optimizer": optimizer}\n') == 1  # left as it is
    copy = tmp_path / "ppo_atari_rnd_shared.py"
    copy.write_text(source)
    return copy


def copy_keeping_the_observation(tmp_path: Path, script: str) -> Path:
    """A copy that keeps the previous step's observation (`prev_obs = next_obs`, as for a frame-difference bonus),
    checks after `envs.step` that it still holds that frame, and prints whether the new frame differs from it."""
    step_line = "            env_start = time.perf_counter()\n"
    after_line = "            rewards[step] = host_reward.to(device, non_blocking=True)\n"
    source = (REPO_ROOT / "cleanrl" / script).read_text()
    assert source.count(step_line) == 1 and source.count(after_line) == 1, "the lines this copy edits have changed"
    source = source.replace(step_line, "            prev_obs = next_obs\n" + step_line)
    source = source.replace(
        after_line,
        after_line
        + """            assert torch.equal(prev_obs, obs[step]), f"step {step}: the kept frame was overwritten"
            print(f"new frame: {not torch.equal(prev_obs, next_obs)}")
""",
    )
    copy = tmp_path / script.replace(".py", "_prev.py")
    copy.write_text(source)
    return copy


KEPT = ["ppo_atari.py", "ppo_atari_multigpu.py"]


@pytest.fixture(scope="module")
def copies_run(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """The short runs of the copies below, one forked child each (see `run_each`): the RND copy under the host-sync
    counter, the copy that leaves the RND out of `state`, the shared-optimizer copy, and the copies that keep an
    observation. Per copy: its --runs-dir and its result."""
    root = tmp_path_factory.mktemp("copies")
    (root / "left_out").mkdir()
    commands = {
        "host syncs": ["-m", "benchmark.lab.host_syncs", str(copy_with_rnd(root)), *RUN, "--total-timesteps", "128"],
        "left out": [str(copy_with_rnd(root / "left_out", save_rnd=False)), *RUN, "--total-timesteps", "64"],
        "shared": [str(copy_with_shared_optimizer(root)), *RUN, "--total-timesteps", "64", "--run-name", "shared"],
    }  # fmt: skip
    cases = []
    for i, args in enumerate(commands.values()):
        (root / str(i)).mkdir()
        cases.append(([*args, "--runs-dir", str(root / str(i) / "runs")], root / str(i)))
    results = run_each(cases, env=FAST, timeout=600, train=True)
    return {name: (cwd / "runs", result) for name, (_, cwd), result in zip(commands, cases, results)}


@pytest.mark.slow
def test_the_intrinsic_reward_costs_no_host_sync_per_step(copies_run):
    _, result = copies_run["host syncs"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "host syncs: rollout step 1, " in result.stdout, result.stdout[-2000:]  # the actions, as in the script


@pytest.mark.slow
def test_a_network_left_out_of_the_checkpoint_is_an_error_at_the_first_save(copies_run):
    assert_one_line_error(
        copies_run["left out"][1],
        "the optimizer 'rnd_optimizer' in the checkpoint's state steps parameters of a network",
    )


# CleanRL's own form of the change (its ppo_rnd_envpool.py): the agent's one optimizer also steps the predictor, and
# `state` is left as it is; the RND class is the one of EDITS
OPTIMIZER_LINE = "    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)\n"
SHARED_OPTIMIZER = """    rnd = RND().to(device)
    optimizer = optim.Adam(list(agent.parameters()) + list(rnd.predictor.parameters()), lr=args.learning_rate, eps=1e-5)
"""
PREDICTOR_STEP = (
    "        y_pred, y_true = torch.stack([b_values, b_returns]).cpu().numpy()\n",
    """\
        optimizer.zero_grad()
        rnd(b_obs).mean().backward()
        optimizer.step()
""",
)


@pytest.mark.slow
def test_a_network_that_shares_the_agents_optimizer_but_not_its_checkpoint_is_an_error_at_the_first_save(copies_run):
    runs, result = copies_run["shared"]
    assert_one_line_error(
        result,
        "the optimizer 'optimizer' in the checkpoint's state steps parameters of a network "
        "not in it: add that network to the script's `state` dict",
    )
    assert "global_step=64/64" in result.stdout, result.stdout[-2000:]  # it trained up to its first save
    assert not (runs / "shared" / "checkpoint.pt").exists()  # nothing a resume would read


def test_a_kept_observation_stays_the_frame_it_was(tmp_path):
    """A copy of each Atari script that keeps the previous step's observation still holds that frame after
    `envs.step` (one forked child each, see `run_each`): the step hands the script a tensor of its own, not the host
    buffer the next step overwrites."""
    copies = [copy_keeping_the_observation(tmp_path, script) for script in KEPT]
    runs = [
        ([str(copy), *RUN, "--total-timesteps", "64", "--runs-dir", str(tmp_path / copy.stem)], tmp_path)
        for copy in copies
    ]
    for script, result in zip(KEPT, run_each(runs, env=FAST, train=True)):
        assert result.returncode == 0, script + result.stderr[-3000:]
        assert "new frame: True" in result.stdout, script + result.stdout[-2000:]  # the frames moved: it could fail
