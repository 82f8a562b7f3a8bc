# PPO for classic-control tasks with discrete actions (CartPole-v1 by default), CleanRL style, on gymnasium 1.x
# (https://docs.cleanrl.dev/rl-algorithms/ppo/#ppopy); with CleanRL's defaults CartPole-v1 passes 195 within 100k steps.
import os

# first, before torch: idle OpenMP threads sleep (cleanrl_utils/__init__.py); Ctrl-C stops in one line
from cleanrl_utils.signals import StopSignals, interrupts_ignored
import random
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter

from cleanrl_utils.progress import Progress
from cleanrl_utils.checkpoint import CHECKPOINT_FILE, load_state, restore_rng, rng_state, save_checkpoint, save_model
from cleanrl_utils.checkpoint import stop_if_diverged
from cleanrl_utils.resume import ResumeMode, open_run, resume_command, start_run
from cleanrl_utils.validation import Count, check_batch, check_env_id, check_extras, check_ranges, fail


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: Count = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default (when available; else it runs on CPU and says so)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases (needs `pip install -e '.[track]'`)"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (env 0, under `{runs_dir}/{run_name}/videos`; needs `.[video]`)"""
    save_model: bool = False
    """whether to save the model to `{runs_dir}/{run_name}/{exp_name}.cleanrl_model` (also when the run stops)"""
    upload_model: bool = False
    """whether to upload the saved model to huggingface at the end of the run: evaluate it, record a replay, write the model card, push (implies --save-model; needs '.[hub]')"""
    hf_entity: str = ""
    """the user or org name of the model repository from the Hugging Face Hub (empty: the logged-in user's)"""
    runs_dir: str = "runs"
    """the folder of the TensorBoard logs, checkpoints and saved models"""
    run_name: str | None = None
    """the run's folder under runs_dir (default: `{env_id}__{exp_name}__{seed}__{unix time}`); name it to resume it"""
    checkpoint_interval: Count = 100
    """save a checkpoint every this many iterations (0: only at the end and on SIGTERM/Ctrl-C)"""
    resume: ResumeMode = "no"  # its help (what a resume may change): cleanrl_utils/resume.py
    progress_bar: bool = True
    """show a progress bar (steps, SPS, recent return, ETA); without a terminal a progress line every 30 s instead"""
    vector_env: Literal["sync", "async"] = "sync"
    """`sync`: all envs step in this process; `async`: one process per env (shared memory)"""
    bf16: bool = False
    """the networks in bfloat16 (autocast; their outputs, the log-probabilities, losses, optimizer and GAE stay float32): for CPUs with AMX or AVX512-BF16 and GPUs with tensor cores; networks this small gain nothing; changes the numbers"""

    # Algorithm specific arguments
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: Count = 500000
    """total timesteps of the experiments (5e5 works too; rounded down to a multiple of num_envs * num_steps)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: Count = 4
    """the number of parallel game environments"""
    num_steps: Count = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: Count = 4
    """the number of mini-batches"""
    update_epochs: Count = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (checked once per epoch: a host sync on a GPU)"""

    # to be filled in runtime (not command-line flags)
    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime)"""


def make_env(env_id, idx, capture_video, video_folder):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_folder)
        else:
            env = gym.make(env_id)
        return env

    return thunk


def make_vector_env(args, run_name):
    """SAME_STEP autoreset: every stored step is a real transition and `dones[t]` says `obs[t]` starts an episode
    (truncation counts as termination, as in CleanRL); finished episodes are in infos["episode"]."""
    video_folder = os.path.join(args.runs_dir, run_name, "videos")
    env_fns = [make_env(args.env_id, i, args.capture_video, video_folder) for i in range(args.num_envs)]
    if args.vector_env == "async":
        envs = gym.vector.AsyncVectorEnv(env_fns, shared_memory=True, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    else:
        envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs, bf16=False):
        super().__init__()
        self.bf16 = bf16  # the networks under bfloat16 autocast (--bf16)
        obs_dim = np.array(envs.single_observation_space.shape).prod()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x):
        with torch.autocast(x.device.type, torch.bfloat16, enabled=self.bf16):
            return self.critic(x).float()

    def get_action_and_value(self, x, action=None):
        with torch.autocast(x.device.type, torch.bfloat16, enabled=self.bf16):
            logits, value = self.actor(x).float(), self.critic(x).float()
        probs = Categorical(logits=logits, validate_args=False)  # validation reads the tensors back: a host sync
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), value


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """GAE over a [num_steps, num_envs] rollout; `dones[t]`: `obs[t]` starts an episode (no bootstrap from it)."""
    nextnonterminal = 1.0 - torch.cat([dones[1:], next_done.view(1, -1)])
    nextvalues = torch.cat([values[1:], next_value.view(1, -1)])
    deltas = rewards + gamma * nextvalues * nextnonterminal - values
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(rewards.shape[0])):
        advantages[t] = lastgaelam = deltas[t] + gamma * gae_lambda * nextnonterminal[t] * lastgaelam
    return advantages, advantages + values


def minibatch_schedule(batch_size: int, num_minibatches: int, update_epochs: int):
    """Per epoch, the index arrays of its minibatches (shuffled with numpy's global RNG, one epoch at a time)."""
    b_inds = np.arange(batch_size)
    size = batch_size // num_minibatches
    for _ in range(update_epochs):
        np.random.shuffle(b_inds)
        yield [b_inds[start : start + size] for start in range(0, batch_size, size)]


def ppo_update(agent, optimizer, args, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values, epochs):
    """The PPO epochs (`epochs`: each one's minibatch index arrays); the last minibatch's losses by name."""
    clipfracs = []
    for minibatches in epochs:
        for mb_inds in minibatches:
            mb_inds = torch.from_numpy(mb_inds).to(b_obs.device, non_blocking=True)
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()

            with torch.no_grad():
                # calculate approx_kl http://joschu.net/blog/kl-approx.html
                old_approx_kl = (-logratio).mean()
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean()]

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
                v_clipped = b_values[mb_inds] + (newvalue - b_values[mb_inds]).clamp(-args.clip_coef, args.clip_coef)
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                v_loss = 0.5 * v_loss_max.mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

            entropy_loss = entropy.mean()
            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()

        if args.target_kl is not None and approx_kl > args.target_kl:  # one host sync per epoch
            break
    stats = {"value_loss": v_loss, "policy_loss": pg_loss, "entropy": entropy_loss, "old_approx_kl": old_approx_kl}
    stats.update(approx_kl=approx_kl, clipfrac=torch.stack(clipfracs).double().mean(), grad_norm=grad_norm)  # unclipped
    # a quantity added to `stats` is logged as losses/NAME; all come back from the device in one transfer
    return dict(zip(stats, torch.stack([value.double() for value in stats.values()]).tolist()))


if __name__ == "__main__":
    args, run_name, ckpt = start_run(Args, __file__)  # a resume: the run's stored settings and its checkpoint

    # bad input stops here with one `error: ...` line, before the run writes anything
    check_ranges(args)
    check_batch(args.num_envs, args.num_steps, args.num_minibatches, args.total_timesteps)
    check_env_id(args.env_id, atari=False)  # before the probe env: an Atari game's pixels would pass as a Box
    check_extras(capture_video=args.capture_video, track=args.track, upload_model=args.upload_model)
    try:  # the env as the run makes it: its spaces, and for --capture-video a drawn frame (classic control: pygame)
        probe_env = gym.make(args.env_id, render_mode="rgb_array" if args.capture_video else None)
        probe_env.reset(seed=0)
        if args.capture_video:
            probe_env.render()
        probe_env.close()
    except gym.error.DependencyNotInstalled as exc:
        why = " ".join(str(exc).split())
        if args.capture_video and "pygame" in why:
            fail(f"--capture-video: {args.env_id!r} cannot draw frames ({why}); pip install -e '.[video]'")
        fail(f"{args.env_id!r} needs a package that is not installed: {why}")
    if not isinstance(probe_env.action_space, gym.spaces.Discrete):
        fail(
            f"{args.env_id!r} has a {type(probe_env.action_space).__name__} action space; this script supports only "
            "Discrete actions (for continuous control use a Gaussian-policy PPO such as CleanRL's "
            "ppo_continuous_action.py)"
        )
    if not isinstance(probe_env.observation_space, gym.spaces.Box):
        fail(
            f"{args.env_id!r} has a {type(probe_env.observation_space).__name__} observation space; this script "
            "needs Box (vector) observations"
        )
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    cuda = args.cuda and torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    with interrupts_ignored():  # async env workers ignore Ctrl-C: this process stops them when it stops
        envs = make_vector_env(args, run_name)
    agent = Agent(envs, bf16=args.bf16).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    # what a checkpoint saves and a resume restores: add your own networks, optimizers, normalisers here
    state = {"agent": agent, "optimizer": optimizer}

    run_dir, ckpt = open_run(args, run_name, state, __file__, ckpt=ckpt)  # the run folder is made here
    start_iteration, global_step, recent_returns = 0, 0, deque(maxlen=20)
    if ckpt is not None:
        start_iteration, global_step, returns = load_state(state, ckpt)
        recent_returns.extend(returns)
        restore_rng(ckpt, device)

    device_text = f"cuda ({torch.cuda.get_device_name(device)})" if cuda else "cpu"
    device_text += " (no CUDA device found: runs on CPU)" if args.cuda and not cuda else ""
    print(
        f"run {run_name}: {args.num_envs} envs ({args.vector_env}), batch {args.batch_size}, minibatch "
        f"{args.minibatch_size}, {args.num_iterations} iteration{'s' * (args.num_iterations != 1)}, device "
        f"{device_text}, logs in {run_dir}",
        flush=True,
    )
    if ckpt is not None:
        print(f"resuming from iteration {start_iteration} (global step {global_step})", flush=True)
    elif args.total_timesteps % args.batch_size > 0.01 * args.total_timesteps:
        print(
            f"note: --total-timesteps {args.total_timesteps} is not a multiple of the batch ({args.batch_size}): "
            f"runs {args.num_iterations * args.batch_size} steps",
            flush=True,
        )
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    if args.bf16 and not (cuda_bf16 or device.type == "cpu" and torch.cpu._is_avx512_bf16_supported()):
        print(
            f"note: --bf16 on a {device.type} without native bfloat16 (AMX, AVX512-BF16, tensor cores): likely slower "
            "than float32 here",
            flush=True,
        )
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            config=vars(args),
            name=run_name,
            id=run_name,
            resume="allow",
            sync_tensorboard=True,
            monitor_gym=True,
            save_code=True,
        )
    # purge_step hides what a crashed run logged after its checkpoint: the curves stay continuous
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if ckpt is not None else None)
    table = "\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])
    writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}", global_step)  # also at each resume's step

    # ALGO Logic: Storage setup; rewards and done flags stay on the host until the rollout ends (one upload each)
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game. Env i has seed `seed + i` (after a resume, new episodes: + num_envs * iteration)
    start_time, start_step = time.time(), global_step
    next_obs, _ = envs.reset(seed=args.seed + start_iteration * args.num_envs)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = np.zeros(args.num_envs, dtype=np.float32)
    progress = Progress(args.num_iterations * args.batch_size, global_step, bar=args.progress_bar)
    stop = StopSignals()  # SIGTERM/Ctrl-C: finish the iteration, checkpoint, exit

    for iteration in range(start_iteration + 1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        # ROLLOUT: one host sync per step, the actions the envs need
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data (the action copy is the step's one host sync)
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations).astype(np.float32)
            rewards[step] = reward
            next_obs = torch.tensor(next_obs, dtype=torch.float32).to(device, non_blocking=True)

            for i in np.flatnonzero(infos.get("_episode", [])):  # the episodes that ended on this step
                episodic_return = float(infos["episode"]["r"][i])
                recent_returns.append(episodic_return)
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["episode"]["l"][i]), global_step)

        # ADVANTAGE: bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages, returns = compute_gae(
            torch.from_numpy(rewards).to(device, non_blocking=True), values,
            torch.from_numpy(dones).to(device, non_blocking=True), next_value,
            torch.from_numpy(next_done).to(device, non_blocking=True), args.gamma, args.gae_lambda,
        )  # fmt: skip

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # UPDATE: optimizing the policy and value network
        epochs = minibatch_schedule(args.batch_size, args.num_minibatches, args.update_epochs)
        stats = ppo_update(
            agent, optimizer, args, b_obs, b_logprobs, b_actions.long(), b_advantages, b_returns, b_values, epochs
        )
        y_pred, y_true = torch.stack([b_values, b_returns]).cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        stop_if_diverged(stats, iteration, run_dir)  # NaN or inf: stop before anything is saved from it

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for key, value in stats.items():
            writer.add_scalar(f"losses/{key}", value, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        progress.update(args.batch_size, sps, list(recent_returns))

        # CHECKPOINT every --checkpoint-interval iterations, at the end and when asked to stop
        due = args.checkpoint_interval > 0 and iteration % args.checkpoint_interval == 0
        if due or stop.requested or iteration == args.num_iterations:
            writer.flush()  # logged steps up to the checkpoint must be on disk before it
            path = os.path.join(run_dir, CHECKPOINT_FILE)
            save_checkpoint(path, state, args, iteration, global_step, [rng_state(device)], recent_returns)
            progress.write(f"checkpoint: iteration {iteration}, global step {global_step}")
        if stop.requested:
            break

    progress.close()
    envs.close()
    writer.close()
    if args.track:
        wandb.finish()
    if args.save_model or args.upload_model:
        model_path = os.path.join(run_dir, f"{args.exp_name}.cleanrl_model")
        save_model(model_path, agent, args)
        print(f"model saved to {model_path}", flush=True)
        if args.upload_model and not stop.requested:  # evaluate, record a replay, write the card, push
            hub = ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", run_dir, "--hf-entity", args.hf_entity]
            push = subprocess.run([sys.executable, *hub])
    if stop.requested:
        print(
            f"\nstopped at global step {global_step}; logs kept in {run_dir}; resume with: "
            f"{resume_command(args, run_name)}",
            file=sys.stderr,
            flush=True,
        )
    sys.exit(128 + stop.requested if stop.requested else push.returncode if args.upload_model else 0)
