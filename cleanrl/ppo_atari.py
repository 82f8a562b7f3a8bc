# PPO for Atari, CleanRL style (https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy), on gymnasium 1.x. The envs
# autoreset in SAME_STEP mode: the step where a game ends returns the reset observation, so every rollout step is a
# real transition and `dones[t]` says `obs[t]` starts a new episode; truncations count as terminations, as in CleanRL.
import os

# first, before torch: idle OpenMP threads sleep (cleanrl_utils/__init__.py); Ctrl-C stops in one line
from cleanrl_utils.signals import StopSignals, interrupts_ignored
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical

from cleanrl_utils.checkpoint import CHECKPOINT_FILE, load_state, restore_rng, rng_state, save_checkpoint, save_model
from cleanrl_utils.checkpoint import stop_if_diverged
from cleanrl_utils.cpu import setup_cpu
from cleanrl_utils.progress import Progress
from cleanrl_utils.resume import ResumeMode, open_run, resume_command, start_run
from cleanrl_utils.validation import Count, check_batch, check_env_id, check_extras, check_ranges
from cleanrl_utils.vector_envs import VectorEnvBackend, games_line, make_atari_vector_env, rank_games, restore_games


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
    """if toggled, this experiment will be tracked with Weights and Biases (`pip install -e '.[track]'`)"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (env 0, to `{runs_dir}/{run_name}/videos`)"""
    save_model: bool = False
    """whether to save the model to `{runs_dir}/{run_name}/{exp_name}.cleanrl_model` (also when the run stops)"""
    upload_model: bool = False
    """whether to upload the saved model to huggingface at the end of the run: evaluate it, record a replay, write the model card, push (implies --save-model; needs '.[hub]')"""
    hf_entity: str = ""
    """the user or org name of the model repository from the Hugging Face Hub (empty: the logged-in user's)"""
    runs_dir: str = "runs"
    """the folder of the TensorBoard logs, checkpoints and saved models"""
    run_name: Optional[str] = None
    """the run's folder under runs_dir (default: `{env_id}__{exp_name}__{seed}__{unix time}`); name it to resume it"""
    checkpoint_interval: Count = 100
    """save a checkpoint every this many iterations (0: only at the end and on SIGTERM/Ctrl-C)"""
    resume: ResumeMode = "no"  # its help (what a resume may change): cleanrl_utils/resume.py
    progress_bar: bool = True
    """show a progress bar (steps, SPS, recent return, ETA); without a terminal a progress line every 30 s instead"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment"""
    vector_env: VectorEnvBackend = "sync"
    """`sync`/`async`: Python wrappers, in this process / one per env; `ale`/`envpool` ('.[envpool]'): C++ threads"""
    env_threads: Count = 0
    """C++ stepping threads of an envpool pool (0: this process's share of the cores); ale: one per env"""
    torch_threads: Count = 0
    """torch threads of this process (0: its share of the cores)"""
    compile: bool = False
    """torch.compile the network (a first call of 10+ s and a C compiler; docs/throughput.md)"""
    bf16: bool = False
    """the network's trunk in bfloat16 (autocast; the heads, losses, optimizer and GAE stay float32): faster on CPUs with AMX or AVX512-BF16 and on GPUs with tensor cores, likely slower elsewhere; changes the numbers (off: CleanRL's float32)"""
    total_timesteps: Count = 10000000
    """total timesteps of the experiments (1e7 works too; rounded down to a multiple of the batch)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: Count = 8
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
    """the target KL divergence threshold (checked once per epoch: a host sync on a GPU)"""

    # to be filled in runtime (not command-line flags)
    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime)"""


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN with policy and value heads, on uint8 frames, channels_last (oneDNN and tensor cores prefer it)"""

    def __init__(self, envs, bf16=False):
        super().__init__()
        self.bf16 = bf16  # the trunk under bfloat16 autocast (--bf16)
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
        self.to(memory_format=torch.channels_last)

    def hidden(self, x):
        # a float copy in the network's layout (never the caller's tensor), scaled in place: one float buffer, not two
        x = x.to(torch.float32, memory_format=torch.channels_last, copy=True).div_(255.0)
        with torch.autocast(x.device.type, torch.bfloat16, enabled=self.bf16):
            return self.network(x).float()  # the heads compute in float32

    def get_value(self, x):
        return self.critic(self.hidden(x))

    def get_action_and_value(self, x, action=None):
        hidden = self.hidden(x)
        logits = self.actor(hidden)
        probs = Categorical(logits=logits, validate_args=False)  # no argument checks: each would wait for the GPU
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


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

    # everything that can be checked is checked here, before the run writes anything
    check_ranges(args)
    check_batch(args.num_envs, args.num_steps, args.num_minibatches, args.total_timesteps)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    check_env_id(args.env_id, atari=True)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    check_extras(capture_video=args.capture_video, track=args.track, upload_model=args.upload_model)
    cores, env_threads, torch_threads, threads_from = setup_cpu(args, args.num_envs)

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup; the env worker processes ignore Ctrl-C: this process stops them when it stops
    videos = os.path.join(args.runs_dir, run_name, "videos") if args.capture_video else None  # env 0's games
    with interrupts_ignored():
        envs = make_atari_vector_env(
            args.vector_env, args.env_id, args.num_envs, env_threads=env_threads, seed=args.seed, video_folder=videos
        )
    agent = Agent(envs, bf16=args.bf16).to(device)
    if args.compile:  # one graph per batch shape (rollout, bootstrap, minibatch)
        agent.get_action_and_value = torch.compile(agent.get_action_and_value, dynamic=False)
        agent.get_value = torch.compile(agent.get_value, dynamic=False)
    # fused: one kernel for all parameters instead of a loop of small ops (CPU and CUDA)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    # what a checkpoint saves and a resume restores: add your own networks, optimizers, normalisers here
    state = {"agent": agent, "optimizer": optimizer}

    # resume: the state, counters and RNG states from the checkpoint (the run folder is made here)
    run_dir, ckpt = open_run(args, run_name, state, __file__, ckpt=ckpt)
    start_iteration, global_step, recent_returns = 0, 0, []
    if ckpt is not None:
        start_iteration, global_step, recent_returns = load_state(state, ckpt)
        restore_rng(ckpt, device)

    envpool_threads = f"{env_threads} env threads, " * (args.vector_env == "envpool")
    print(f"run {run_name}: {device.type}, {args.num_envs} envs ({args.vector_env}), batch {args.batch_size}, minibatch "
          f"{args.minibatch_size}, {args.num_iterations} iteration{'s' * (args.num_iterations > 1)}, {cores} core{'s' * (cores > 1)}: "
          f"{envpool_threads}{torch_threads} torch threads ({threads_from}), logs in {run_dir}", flush=True)  # fmt: skip
    if args.cuda and device.type == "cpu":
        print("note: torch sees no CUDA device here: running on CPU (--no-cuda silences this)", flush=True)
    has_bf16 = torch.cuda.is_bf16_supported(False) if device.type == "cuda" else torch.cpu._is_avx512_bf16_supported()
    if args.bf16 and not has_bf16:  # (AMX CPUs have AVX512-BF16 too)
        print(f"note: --bf16 is likely slower here: this {device.type} has no native bfloat16", flush=True)
    if ckpt is None and args.total_timesteps % args.batch_size > 0.01 * args.total_timesteps:
        batch, steps = args.batch_size, args.num_iterations * args.batch_size
        print(
            f"note: --total-timesteps {args.total_timesteps} is not a multiple of the batch ({batch}): runs {steps} steps"
        )
    if ckpt is not None:
        note = games_line(ckpt, envs)  # whether the games in progress go on (sync/async) or new ones start
        print(f"resuming from iteration {start_iteration} (global step {global_step}){note}", flush=True)
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
    from torch.utils.tensorboard import SummaryWriter  # imported here: it costs seconds of CPU

    # purge_step hides what a crashed run logged after its checkpoint: the curves stay continuous
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if ckpt is not None else None)
    table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
    writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}", global_step)  # at a resume's step too

    # ALGO Logic: Storage setup; frames stay uint8 (4x smaller than float32), done flags on the host until the update
    obs = torch.zeros((args.num_steps,) + envs.observation_space.shape, dtype=torch.uint8).to(device)
    actions = torch.zeros((args.num_steps, envs.num_envs) + envs.single_action_space.shape, dtype=torch.long).to(device)
    logprobs = torch.zeros((args.num_steps, envs.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, envs.num_envs)).to(device)
    dones = np.zeros((args.num_steps, envs.num_envs), dtype=np.float32)
    values = torch.zeros((args.num_steps, envs.num_envs)).to(device)
    # each step's frames and rewards reach the device through these host buffers, pinned on CUDA: no wait for the GPU
    host_obs = torch.zeros(envs.observation_space.shape, dtype=torch.uint8, pin_memory=device.type == "cuda")
    host_reward = torch.zeros(envs.num_envs, pin_memory=device.type == "cuda")

    # TRY NOT TO MODIFY: start the game; env i has seed `seed + i` (after a resume, + num_envs * iteration)
    start_time, start_step = time.time(), global_step
    next_obs, _ = envs.reset(seed=args.seed + start_iteration * args.num_envs)
    next_obs = torch.as_tensor(next_obs, device=device)
    next_obs, next_done = restore_games(envs, ckpt, 0, next_obs, np.zeros(envs.num_envs, dtype=np.float32))
    progress = Progress(args.num_iterations * args.batch_size, global_step, bar=args.progress_bar)
    stop = StopSignals()  # SIGTERM/Ctrl-C: finish the iteration, checkpoint, exit
    for iteration in range(start_iteration + 1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        # ROLLOUT: one host sync per step, the actions the envs need
        rollout_start, env_seconds, episodes = time.perf_counter(), 0.0, []
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.inference_mode():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            env_start = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            env_seconds += time.perf_counter() - env_start
            next_done = np.logical_or(terminations, truncations).astype(np.float32)
            host_obs.copy_(torch.from_numpy(next_obs)), host_reward.copy_(torch.from_numpy(reward))
            next_obs = host_obs.to(device, non_blocking=True, copy=True)  # its own: host_obs changes next step
            rewards[step] = host_reward.to(device, non_blocking=True)
            if "episode" in infos.get("final_info", {}):  # full games (all lives) that ended on this step
                game, ended = infos["final_info"]["episode"], infos["final_info"]["_episode"]
                for episodic_return, episodic_length in zip(game["r"][ended].tolist(), game["l"][ended].tolist()):
                    episodes.append((episodic_return, episodic_length, global_step))  # logged at this step
        learn_start = time.perf_counter()

        # ADVANTAGE: bootstrap value if not done
        with torch.inference_mode():
            next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages, returns = compute_gae(
            rewards, values, torch.from_numpy(dones).to(device, non_blocking=True), next_value,
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
            agent, optimizer, args, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values, epochs
        )
        y_pred, y_true = torch.stack([b_values, b_returns]).cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        lap = {"env": env_seconds, "inference": learn_start - rollout_start - env_seconds}
        lap["learn"] = time.perf_counter() - learn_start
        stop_if_diverged(stats, iteration, run_dir)  # NaN or inf: stop before anything is saved from it

        # LOGGING: TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_step) / (time.time() - start_time))
        recent_returns = (recent_returns + [episodic_return for episodic_return, *_ in episodes])[-20:]
        progress.update(args.batch_size, sps, recent_returns)
        for episodic_return, episodic_length, ended_at in episodes:  # each game that ended, at its step
            writer.add_scalar("charts/episodic_return", episodic_return, ended_at)
            writer.add_scalar("charts/episodic_length", episodic_length, ended_at)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for key, value in stats.items():
            writer.add_scalar(f"losses/{key}", value, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        for key, phase_seconds in lap.items():  # wall seconds of this iteration spent in each phase
            writer.add_scalar(f"perf/{key}_seconds", phase_seconds, global_step)

        # CHECKPOINT every --checkpoint-interval iterations, at the end and when asked to stop
        due = args.checkpoint_interval > 0 and iteration % args.checkpoint_interval == 0
        if due or stop.requested or iteration == args.num_iterations:
            writer.flush()  # logged steps up to the checkpoint must be on disk before it
            path = os.path.join(run_dir, CHECKPOINT_FILE)
            games = rank_games(envs, next_obs, next_done)  # this rank's games (sync/async): a resume goes on with them
            save_checkpoint(path, state, args, iteration, global_step, [rng_state(device) | games], recent_returns)
            progress.write(f"checkpoint: iteration {iteration}, global step {global_step}")
        if stop.requested:
            break

    progress.close()
    envs.close()
    writer.close()
    if stop.requested:
        resume = resume_command(args, run_name)
        print(f"\nstopped at global step {global_step}; logs kept in {run_dir}; resume with: {resume}", file=sys.stderr)
    if args.save_model or args.upload_model:
        model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
        save_model(model_path, agent, args)
        print(f"model saved to {model_path}", flush=True)
        if args.upload_model and not stop.requested:  # evaluate, record a replay, write the card, push
            hub = ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", run_dir, "--hf-entity", args.hf_entity]
            push = subprocess.run([sys.executable, *hub])
    sys.exit(128 + stop.requested if stop.requested else push.returncode if args.upload_model else 0)
