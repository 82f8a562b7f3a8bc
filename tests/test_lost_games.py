"""The replay of a checkpoint's games (benchmark/lab/lost_games.py) on the real emulator: every game is counted, its
actions and (on the Python wrappers) its paddle are read, and the figures the learning report shows are written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import FAST, run_script

from cleanrl.ppo_atari import Agent
from cleanrl_utils.vector_envs import make_atari_vector_env


@pytest.mark.slow
def test_an_untrained_agent_loses_every_game_and_its_paddle_is_read(tmp_path):
    torch.manual_seed(0)
    envs = make_atari_vector_env("sync", "PongNoFrameskip-v4", 1)
    model = tmp_path / "untrained.cleanrl_model"
    torch.save({"model": Agent(envs).state_dict(), "env_id": "PongNoFrameskip-v4"}, model)
    envs.close()
    out = tmp_path / "replay.json"
    result = run_script(
        ["-m", "benchmark.lab.lost_games", str(model), "--games", "2", "--num-envs", "2", "--out", str(out)],
        cwd=tmp_path,
        timeout=300,
        env=FAST,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    replay = json.loads(out.read_text())
    assert replay["games"] == 2 and len(replay["returns"]) == 2 and max(replay["returns"]) < 0  # it cannot play
    assert replay["lost"]["games"] == 2 and "rest" not in replay
    assert replay["action_names"] == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
    assert np.sum(replay["lost"]["action_shares"]) == pytest.approx(1, abs=1e-3)
    assert replay["lost"]["entropy"] == pytest.approx(np.log(6), abs=0.01)  # an untrained head is near uniform
    low, median, high = replay["lost"]["paddle_y_quartiles"]
    assert 38 <= low <= median <= high <= 203  # the paddle's range in RAM, top to bottom
    assert result.stdout.count("game ") >= 2 and "2 below 0" in result.stdout
