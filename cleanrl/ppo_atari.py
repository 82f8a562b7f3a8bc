# PPO for Atari, CleanRL style, on gymnasium 1.x / ale-py 0.11+ / torch 2.x.
# Docs of the original: https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy
#
# Autoreset: the vector env runs with gymnasium's SAME_STEP autoreset mode. On the step where an episode ends, the
# env is reset at once and the step returns the *reset* observation (the final one is in infos["final_obs"]).
# So every step of the rollout is a real transition taken by the policy, `dones[t]` says that `obs[t]` is the
# first observation of a new episode, and GAE's `1 - dones[t + 1]` cuts the bootstrap at every episode boundary.
# The default NEXT_STEP mode would instead return, one step after a done, a reset observation for an action that
# the env ignores (reward 0): that transition would have to be masked out of the loss and would waste 1 step in
# every episode. Truncations (the 108k-frame cap) are treated like terminations, as in CleanRL.
#
# Throughput (docs/throughput.md): `--vector-env ale` steps the envs in ale-py's C++ threads, `--overlap` splits the
# envs into two groups and steps one while the policy acts for the other, threads are sized to the machine
# (cleanrl_utils/placement.py), and the time of every iteration is split into env / inference / learning
# (`perf/...` scalars and a `perf:` line at the end). All backends give the same autoreset and episode semantics
# (cleanrl_utils/vector_envs.py).
import os

# Idle OpenMP threads sleep instead of spinning. PyTorch's OpenMP workers otherwise busy-wait after every parallel
# region and take the cores from the env threads that step right after inference: measured on 2 cores,
# `--vector-env ale` spent 4.0 s stepping envs in 8 iterations with spinning workers and 2.7 s without
# (docs/throughput.md). Must be set before torch loads OpenMP; an explicit OMP_WAIT_POLICY wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import random
import signal
import sys
import time
from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from cleanrl_utils.checks import check_atari_env_id, check_batch, check_positive, fail, prepare_run_dir
from cleanrl_utils.malloc import keep_freed_memory
from cleanrl_utils.placement import plan_threads, use_threads
from cleanrl_utils.vector_envs import VectorEnvBackend, check_backend, make_atari_vector_env, split_groups


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases (`pip install -e .[track]`)"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (env 0, to `videos/{run_name}`)"""
    save_model: bool = False
    """whether to save the model to `{runs_dir}/{run_name}/{exp_name}.cleanrl_model` (also when the run stops)"""
    runs_dir: str = "runs"
    """the folder of the TensorBoard logs and saved models"""
    progress_bar: bool = True
    """show a progress bar (steps, SPS, recent return); off anyway when stdout is not a terminal"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment"""
    vector_env: VectorEnvBackend = "sync"
    """the vector env: `sync` / `async` (Python wrappers, in this process / one process per env), `ale` (ale-py's
    C++ threads) or `envpool` (pip install -e '.[envpool]'); same semantics for all (cleanrl_utils/vector_envs.py)"""
    overlap: bool = False
    """step half of the envs while the policy computes the actions of the other half (async, ale, envpool)"""
    env_threads: int = 0
    """C++ stepping threads of an ale/envpool pool (0: one per core of this process)"""
    torch_threads: int = 0
    """torch threads (0: all cores of this process; 1 for the rollout's inference with --overlap)"""
    compile: bool = False
    """torch.compile the network (a first call of 10+ s and a C compiler; see docs/throughput.md for the gain)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def make_vector_env(args: Args, run_name: str, env_threads: int = 0) -> gym.vector.VectorEnv:
    """All `num_envs` envs in one vector env (SAME_STEP autoreset, uint8 (4, 84, 84) frames, clipped rewards)."""
    return make_atari_vector_env(
        args.vector_env, args.env_id, args.num_envs, env_threads=env_threads, seed=args.seed,
        capture_video=args.capture_video, run_name=run_name,
    )


def episode_stats(infos: dict) -> list[tuple[float, int]]:
    """(return, length) of every full game that ended on this step.

    With SAME_STEP autoreset the info of the ending step moves to `infos["final_info"]`, and the inner
    RecordEpisodeStatistics reports only real game overs (not lost lives).
    """
    final = infos.get("final_info", {})
    if "episode" not in final:
        return []
    mask = final["_episode"]
    return list(zip(final["episode"]["r"][mask].tolist(), final["episode"]["l"][mask].tolist()))


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN with a policy and a value head. Takes uint8 frames; converts to float only here.

    The convolutions run in the `channels_last` memory format: on CPU (oneDNN) training is about twice as fast
    as in the default layout, and on recent GPUs it is the layout tensor cores prefer. (`memory_format` is a
    parameter only so that the throughput benchmark can time the other layout.)
    """

    def __init__(self, envs, memory_format=torch.channels_last):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)
        self.memory_format = memory_format
        self.to(memory_format=memory_format)

    def hidden(self, x):
        # layout first (on uint8, 4x fewer bytes to move), then float: a no-op for the rollout buffer's minibatches,
        # which are stored channels_last already
        x = x.contiguous(memory_format=self.memory_format).to(torch.float32).div_(255.0)
        return self.network(x)

    def get_value(self, x):
        return self.critic(self.hidden(x))

    def get_action_and_value(self, x, action=None):
        hidden = self.hidden(x)
        logits = self.actor(hidden)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """Generalized advantage estimation over a rollout of shape [num_steps, num_envs].

    `dones[t]` is 1 when `obs[t]` starts a new episode, so the value of step t+1 is bootstrapped only when
    `dones[t + 1]` is 0 (`next_done` plays that part after the last step).
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def collect_rollout(
    envs, agent, next_obs, next_done, obs, actions, logprobs, rewards, dones, values, device, timings=None
):
    """Step the vector env `num_steps` times with the policy, filling the buffers in place.

    Returns the observation and done flags after the last step (for the bootstrap) and the (return, length)
    of every game that ended. `timings`, if given, accumulates seconds under "env" and "inference".
    """
    timings = {} if timings is None else timings
    episodes = []
    for step in range(obs.shape[0]):
        tick = time.perf_counter()
        obs[step] = next_obs
        dones[step] = next_done
        with torch.inference_mode():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        action_np = action.cpu().numpy()
        tock = time.perf_counter()
        timings["inference"] = timings.get("inference", 0.0) + tock - tick

        next_obs_np, reward, terminations, truncations, infos = envs.step(action_np)
        rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
        next_obs = torch.as_tensor(next_obs_np, device=device)
        next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
        episodes += episode_stats(infos)
        timings["env"] = timings.get("env", 0.0) + time.perf_counter() - tock
    return next_obs, next_done, episodes


def collect_rollout_overlapped(
    groups, agent, next_obs, next_done, obs, actions, logprobs, rewards, dones, values, device, timings=None
):
    """`collect_rollout` with the envs split into two groups (columns [0, n/2) and [n/2, n) of the buffers) that
    take turns: the policy acts for one group while the other steps in the background (`step_async`), so env
    stepping and inference run at the same time. Per step t and group g, the buffers get exactly what
    `collect_rollout` would store: obs[t] and the action sampled for it, then the reward of that action.
    `timings["env"]` counts only the time spent waiting for a group (`step_wait`).
    """
    timings = {} if timings is None else timings
    timings.setdefault("env", 0.0)
    timings.setdefault("inference", 0.0)
    half = obs.shape[1] // 2
    cols = (slice(0, half), slice(half, 2 * half))
    next_obs, next_done = next_obs.clone(), next_done.clone()
    episodes = []

    def act(step, g):  # store obs[step] of group g, sample its actions and send them
        tick = time.perf_counter()
        c = cols[g]
        obs[step, c] = next_obs[c]
        dones[step, c] = next_done[c]
        with torch.inference_mode():
            action, logprob, _, value = agent.get_action_and_value(next_obs[c])
        values[step, c] = value.flatten()
        actions[step, c] = action
        logprobs[step, c] = logprob
        action_np = action.cpu().numpy()
        timings["inference"] += time.perf_counter() - tick
        groups[g].step_async(action_np)

    def observe(step, g):  # wait for group g's step and store its outcome
        tick = time.perf_counter()
        c = cols[g]
        next_obs_np, reward, terminations, truncations, infos = groups[g].step_wait()
        timings["env"] += time.perf_counter() - tick
        rewards[step, c] = torch.as_tensor(reward, dtype=torch.float32, device=device)
        next_obs[c] = torch.as_tensor(next_obs_np, device=device)
        next_done[c] = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
        episodes.extend(episode_stats(infos))

    for step in range(obs.shape[0]):
        act(step, 0)  # group 0 steps ...
        if step > 0:
            observe(step - 1, 1)
        act(step, 1)  # ... while the policy acts for group 1, which then steps while the policy acts for group 0
        observe(step, 0)
    observe(obs.shape[0] - 1, 1)
    return next_obs, next_done, episodes


def save_model(path: str, agent: nn.Module, args: Args) -> None:
    """Weights plus what is needed to rebuild and check the agent (loadable with `weights_only=True`)."""
    tmp = path + ".tmp"
    torch.save({"model": agent.state_dict(), "env_id": args.env_id, "exp_name": args.exp_name}, tmp)
    os.replace(tmp, path)


class Stop(Exception):
    """Raised by the SIGTERM handler so that the run closes its logs and saves its model before exiting."""


def _on_sigterm(signum, frame):
    raise Stop()


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_positive(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        num_minibatches=args.num_minibatches,
        update_epochs=args.update_epochs,
        total_timesteps=args.total_timesteps,
        learning_rate=args.learning_rate,
    )
    check_atari_env_id(args.env_id)
    check_batch(args.num_envs, args.num_steps, args.num_minibatches, args.total_timesteps)
    if args.env_threads < 0 or args.torch_threads < 0:
        fail("--env-threads and --torch-threads must be >= 0 (0: sized to the machine)")
    check_backend(args.vector_env, args.num_envs, args.overlap, args.capture_video)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = prepare_run_dir(os.path.join(args.runs_dir, run_name))
    if args.capture_video:
        try:
            import moviepy  # noqa: F401
        except ImportError:
            fail("--capture-video needs moviepy: pip install -e '.[video]'")
    if args.track:
        try:
            import wandb
        except ImportError:
            fail("--track needs wandb: pip install -e '.[track]'")
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            monitor_gym=True,
            save_code=True,
        )
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )
    threads = plan_threads(
        args.num_envs // (2 if args.overlap else 1), args.env_threads, args.torch_threads, overlap=args.overlap
    )
    print(
        f"run {run_name}: {args.num_envs} envs ({args.vector_env}{', overlapped' if args.overlap else ''}), "
        f"batch {args.batch_size}, minibatch {args.minibatch_size}, {args.num_iterations} iterations, "
        f"{threads.describe()}, logs in {run_dir}",
        flush=True,
    )

    keep_freed_memory()  # no page faults for the big tensors of every minibatch (cleanrl_utils/malloc.py)

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup: one vector env, or two groups of envs stepped in turn (--overlap)
    if args.overlap:
        groups = split_groups(
            args.vector_env, args.env_id, args.num_envs, env_threads=threads.env_threads, seed=args.seed,
            capture_video=args.capture_video, run_name=run_name,
        )
        envs = groups[0]  # for the spaces
    else:
        envs = make_vector_env(args, run_name, threads.env_threads)
    agent = Agent(envs).to(device)
    if args.compile:  # one graph per batch shape (rollout, bootstrap, minibatch)
        agent.get_action_and_value = torch.compile(agent.get_action_and_value, dynamic=False)
        agent.get_value = torch.compile(agent.get_value, dynamic=False)
    # fused: one kernel for all parameters instead of a loop of small ops (CPU and CUDA; same update rule)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    # ALGO Logic: Storage setup; observations stay uint8 (4x smaller than float32) until the network. `obs` is
    # indexed (step, env, frame, height, width) but laid out with the frames last in memory (channels_last), the
    # network's layout: a minibatch gathered from it goes to float without a transpose.
    frames, height, width = envs.single_observation_space.shape
    obs = torch.zeros((args.num_steps, args.num_envs, height, width, frames), dtype=torch.uint8, device=device)
    obs = obs.permute(0, 1, 4, 2, 3)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, dtype=torch.long).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    start_time = time.time()
    if args.overlap:
        half = args.num_envs // 2
        next_obs = np.concatenate([g.reset(seed=args.seed + i * half)[0] for i, g in enumerate(groups)])
    else:
        next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(next_obs, device=device)
    next_done = torch.zeros(args.num_envs).to(device)
    recent_returns: list[float] = []
    total_timings: dict[str, float] = {}
    progress = tqdm(
        total=args.num_iterations * args.batch_size,
        unit="step",
        disable=not (args.progress_bar and sys.stdout.isatty()),
        dynamic_ncols=True,
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    exit_code = 0
    try:
        for iteration in range(1, args.num_iterations + 1):
            # Annealing the rate if instructed to do so.
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                lrnow = frac * args.learning_rate
                optimizer.param_groups[0]["lr"] = lrnow

            # ROLLOUT
            use_threads(threads.inference_threads)
            timings = {}
            rollout = collect_rollout_overlapped if args.overlap else collect_rollout
            next_obs, next_done, episodes = rollout(
                groups if args.overlap else envs,
                agent, next_obs, next_done, obs, actions, logprobs, rewards, dones, values, device, timings,
            )
            learn_start = time.perf_counter()
            use_threads(threads.learning_threads)
            for i, (episodic_return, episodic_length) in enumerate(episodes):
                # an episode ended during this rollout; log it at the end-of-rollout step (the exact step
                # inside the rollout is not worth a per-step callback in the hot loop)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step + args.batch_size)
                writer.add_scalar("charts/episodic_length", episodic_length, global_step + args.batch_size)
                recent_returns = (recent_returns + [episodic_return])[-20:]
            global_step += args.batch_size

            # ADVANTAGE: bootstrap value if not done
            with torch.inference_mode():
                next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages, returns = compute_gae(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)

            # flatten the batch
            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
            b_logprobs = logprobs.reshape(-1)
            b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)

            # UPDATE: optimizing the policy and value network
            b_inds = np.arange(args.batch_size)
            clipfracs = []
            for epoch in range(args.update_epochs):
                np.random.shuffle(b_inds)
                for start in range(0, args.batch_size, args.minibatch_size):
                    end = start + args.minibatch_size
                    mb_inds = b_inds[start:end]

                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()

                    with torch.no_grad():
                        # calculate approx_kl http://joschu.net/blog/kl-approx.html
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                    mb_advantages = b_advantages[mb_inds]
                    if args.norm_adv:
                        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                    # Policy loss
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    # Value loss
                    newvalue = newvalue.view(-1)
                    if args.clip_vloss:
                        v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                        v_clipped = b_values[mb_inds] + torch.clamp(
                            newvalue - b_values[mb_inds],
                            -args.clip_coef,
                            args.clip_coef,
                        )
                        v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                        v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                        v_loss = 0.5 * v_loss_max.mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                    entropy_loss = entropy.mean()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

                if args.target_kl is not None and approx_kl > args.target_kl:
                    break

            timings["learn"] = time.perf_counter() - learn_start
            for key, seconds in timings.items():
                total_timings[key] = total_timings.get(key, 0.0) + seconds
            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            # LOGGING: TRY NOT TO MODIFY: record rewards for plotting purposes
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
            writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            for key, seconds in timings.items():  # wall seconds of this iteration spent in each phase
                writer.add_scalar(f"perf/{key}_seconds", seconds, global_step)
            progress.update(args.batch_size)
            progress.set_postfix(SPS=sps, ret=f"{np.mean(recent_returns):.1f}" if recent_returns else "-")
    except (KeyboardInterrupt, Stop):
        print(f"\nstopped at global step {global_step}; logs kept in {run_dir}", file=sys.stderr)
        exit_code = 130
    finally:
        progress.close()
        elapsed = time.time() - start_time
        rate = global_step / max(elapsed, 1e-9)
        print(
            f"perf: steps={global_step} seconds={elapsed:.2f} steps_per_second={rate:.1f} "
            + " ".join(f"{key}={seconds:.2f}" for key, seconds in total_timings.items()),
            flush=True,
        )
        if args.save_model:
            model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
            save_model(model_path, agent, args)
            print(f"model saved to {model_path}")
        for env_group in groups if args.overlap else [envs]:
            env_group.close()
        writer.close()
    sys.exit(exit_code)
