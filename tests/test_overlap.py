"""--overlap as one object (cleanrl_utils/overlap.py): the rollout of ppo_atari.py over two groups of envs that take
turns stores, per step and env, exactly what a plain rollout would.

(Moved from tests/test_vector_envs.py, whose copy still calls the old `collect_rollout_overlapped` of the script:
its owner removes it there.)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from helpers import load_script

from cleanrl_utils.overlap import OverlappedVectorEnv
from cleanrl_utils.progress import PhaseTimer
from cleanrl_utils.vector_envs import SyncVectorEnv

ppo_atari = load_script("cleanrl/ppo_atari.py", "ppo_atari_overlap_test")


class StepCounterEnv(gym.Env):
    """Frame value = 16 * env index + steps taken (mod 16); records the actions it receives; ends every 5 steps."""

    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, index: int):
        self.index, self.steps, self.received = index, 0, []

    def _obs(self):
        return np.full((4, 84, 84), 16 * self.index + self.steps % 16, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        return self._obs(), {}

    def step(self, action):
        self.received.append(int(action))
        self.steps += 1
        return self._obs(), float(self.steps), self.steps % 5 == 0, False, {}


class RecordingAgent(torch.nn.Module):
    """Samples random actions and remembers which action it sampled for which observation (one call at a time)."""

    def __init__(self):
        super().__init__()
        self.sampled: dict[int, list[int]] = {}
        self.generator = torch.Generator().manual_seed(0)

    def get_action_and_value(self, x, action=None):
        frame = x[:, 0, 0, 0].long()
        action = torch.randint(0, 6, (len(x),), generator=self.generator)
        for f, a in zip(frame.tolist(), action.tolist()):
            self.sampled.setdefault(f, []).append(a)
        return action, -action.float(), torch.zeros(len(x)), frame.float().unsqueeze(1)


def test_overlapped_rollout_keeps_every_env_trajectory_contiguous_and_its_own_actions():
    num_envs, num_steps = 4, 12
    env_objs = [StepCounterEnv(i) for i in range(num_envs)]
    groups = [
        SyncVectorEnv([lambda e=e: e for e in env_objs[g * 2 : g * 2 + 2]],
                      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        for g in range(2)
    ]
    first = np.concatenate([g.reset(seed=0)[0] for g in groups])
    obs = torch.zeros((num_steps, num_envs, 4, 84, 84), dtype=torch.uint8)
    actions = torch.zeros((num_steps, num_envs), dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros((num_steps, num_envs)) for _ in range(4))
    agent = RecordingAgent()
    timer = PhaseTimer()
    envs = OverlappedVectorEnv(groups)
    assert (envs.num_envs, envs.slices) == (num_envs, [slice(0, 2), slice(2, 4)])
    next_obs, next_done, _ = ppo_atari.collect_rollout(
        envs, agent, torch.as_tensor(first), torch.zeros(num_envs), obs, actions, logprobs, rewards, dones,
        values, torch.device("cpu"), timer,
    )
    frames = obs[:, :, 0, 0, 0].long()
    for e in range(num_envs):
        # column e holds env e's own steps 0..num_steps-1, in order, none skipped or repeated
        assert frames[:, e].tolist() == [16 * e + t for t in range(num_steps)]
        # the env received exactly the actions stored in its column, in that order ...
        assert env_objs[e].received == actions[:, e].tolist()
        # ... and each is the action the policy sampled for that very observation
        for t in range(num_steps):
            assert agent.sampled[16 * e + t] == [int(actions[t, e])]
        assert rewards[:, e].tolist() == [float(t + 1) for t in range(num_steps)]
        assert dones[:, e].tolist() == [0.0] + [float(t % 5 == 0) for t in range(1, num_steps)]
        assert logprobs[:, e].tolist() == (-actions[:, e].float()).tolist()
        assert values[:, e].tolist() == frames[:, e].float().tolist()
    assert next_obs[:, 0, 0, 0].tolist() == [16 * e + num_steps for e in range(num_envs)]
    assert next_done.tolist() == [0.0] * num_envs  # step 12 is not a multiple of 5
    assert set(timer.total) == {"env", "inference"}
    envs.close()
