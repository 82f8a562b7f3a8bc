# Data-parallel PPO for Atari over torch.distributed, CleanRL style. Same PPO, autoreset and logging as
# ppo_atari.py (read that file's header for SAME_STEP autoreset); what this file adds:
#
# * Each process (rank) steps its own vector env of `--local-num-envs` games and computes gradients on its own
#   share of the batch. After every minibatch backward pass the gradients are averaged over the ranks with ONE
#   all-reduce of a flattened buffer; the advantages of a minibatch are normalised with the mean/std of the whole
#   (global) minibatch. So N ranks make exactly the update one process would make on the N rank batches put
#   together (tests/test_multigpu_update.py checks this).
# * Launch: `torchrun --standalone --nnodes=1 --nproc_per_node=2 cleanrl/ppo_atari_multigpu.py --num-envs 16`
#   (one node), `torchrun --nnodes=2 --nproc_per_node=G --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT ...` on each
#   of 2 nodes, or plain `python cleanrl/ppo_atari_multigpu.py` (one process).
# * Checkpoints: every `--checkpoint-interval` iterations, at the end of the run and on SIGTERM/Ctrl-C, rank 0 writes
#   `{runs_dir}/{run_name}/checkpoint.pt` (model, optimizer, iteration, global step = TensorBoard step, the RNG states
#   of every rank) atomically. `--resume`, or a torchrun restart (`--max-restarts`), continues from it; see
#   `resolve_run_name` for how a restarted group finds its run directory. The games' emulator states are NOT in
#   the checkpoint: after a resume every env starts a new game, seeded from the iteration (deterministic), so a
#   resumed run continues the same policy, optimizer, learning-rate schedule and step axis, with fresh games.
import hashlib
import os

# Idle OpenMP threads sleep instead of spinning, so they leave the cores to the env threads (see ppo_atari.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import random
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, NoReturn, Optional

import gymnasium as gym
import numpy as np
import psutil
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
from tqdm import tqdm

from cleanrl_utils.malloc import keep_freed_memory
from cleanrl_utils.placement import plan_threads, use_threads
from cleanrl_utils.vector_envs import VectorEnvBackend, check_backend, make_atari_vector_env
from cleanrl_utils.checks import check_atari_env_id, check_positive, fail, prepare_run_dir

CHECKPOINT_FORMAT = 1
DEFAULT_LOCAL_NUM_ENVS = 8


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (rank r seeds its RNGs with seed + r and its envs with seed + its global env index)"""
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
    """whether to capture videos of the agent performances (rank 0, env 0, to `videos/{run_name}`)"""
    save_model: bool = False
    """whether to save the model to `{runs_dir}/{run_name}/{exp_name}.cleanrl_model` (rank 0, at the end)"""
    runs_dir: str = "runs"
    """the folder of the TensorBoard logs, checkpoints and saved models"""
    run_name: Optional[str] = None
    """the run's folder name under runs_dir (default: `{env_id}__{exp_name}__{seed}__{unix time}`); give it to resume
    a known run, e.g. from a cluster job that may be requeued"""
    progress_bar: bool = True
    """show a progress bar on rank 0 (steps, SPS, recent return); off anyway when stdout is not a terminal"""

    # Distributed
    backend: Optional[Literal["gloo", "nccl", "mpi"]] = None
    """torch.distributed backend (default: nccl when this rank has a CUDA device, else gloo)"""
    device_ids: Optional[list[int]] = None
    """the CUDA device of each local rank of a node, e.g. `0 0 1 1` (2 ranks per GPU); default: local rank % GPUs"""
    torch_threads: Optional[int] = None
    """torch CPU threads per rank (default: cores of this machine // ranks on this node; cleanrl_utils/placement.py)"""
    env_threads: int = 0
    """C++ stepping threads of each rank's ale/envpool pool (0: cores of this machine // ranks on this node)"""
    dist_timeout: float = 600.0
    """seconds a rank waits for the others (joining the group, each collective) before it gives up with an error"""
    checkpoint_interval: int = 100
    """save a checkpoint every this many iterations (0: only at the end and on SIGTERM/Ctrl-C)"""
    resume: bool = False
    """continue from the checkpoint of --run-name (default: the newest run of this env/exp/seed with a checkpoint);
    starts from scratch when there is none. torchrun restarts resume without it"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment"""
    vector_env: VectorEnvBackend = "sync"
    """the vector env of each rank: `sync` / `async` (Python wrappers, in the rank's process / one process per env),
    `ale` (ale-py's C++ threads) or `envpool`; same semantics for all (cleanrl_utils/vector_envs.py)"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (all ranks together)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: Optional[int] = None
    """the number of parallel game environments of all ranks together (default: local_num_envs * world size)"""
    local_num_envs: Optional[int] = None
    """the number of parallel game environments of each rank (default: num_envs / world size, or 8)"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches (each rank splits its own batch into this many)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (with the mean and std of the global minibatch)"""
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
    """the target KL divergence threshold (compared with the mean over the ranks)"""

    # to be filled in runtime
    world_size: int = 0
    """the number of ranks (computed in runtime)"""
    batch_size: int = 0
    """the batch size of all ranks together (computed in runtime)"""
    local_batch_size: int = 0
    """the batch size of each rank (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size of all ranks together (computed in runtime)"""
    local_minibatch_size: int = 0
    """the mini-batch size of each rank (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


@dataclass
class DistInfo:
    """Where this process sits in the job, read from the launcher's environment (torchrun, or mpirun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    launched: bool = False
    """started by torchrun or mpirun (a process group is formed, even of size 1)"""


def read_dist_env() -> DistInfo:
    env = os.environ
    for rank, size, local_rank, local_size in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),  # torchrun
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH / Intel MPI
    ):
        if size in env:
            return DistInfo(
                rank=int(env.get(rank, "0")),
                world_size=int(env[size]),
                local_rank=int(env.get(local_rank, "0")),
                local_world_size=int(env.get(local_size, env[size])),
                launched=True,
            )
    return DistInfo()


def resolve_sizes(args: Args, world_size: int) -> None:
    """Fill in the env counts, batch sizes and iterations; every rank computes the same, before any communication."""
    check_positive(
        num_steps=args.num_steps,
        num_minibatches=args.num_minibatches,
        update_epochs=args.update_epochs,
        total_timesteps=args.total_timesteps,
        learning_rate=args.learning_rate,
    )
    given = {k: v for k, v in (("num_envs", args.num_envs), ("local_num_envs", args.local_num_envs)) if v is not None}
    check_positive(**given)
    if args.local_num_envs is None:
        if args.num_envs is None:
            args.local_num_envs = DEFAULT_LOCAL_NUM_ENVS
        elif args.num_envs % world_size != 0:
            fail(
                f"--num-envs {args.num_envs} is not divisible by the world size {world_size}: give a multiple of "
                f"{world_size}, or the per-rank count with --local-num-envs"
            )
        else:
            args.local_num_envs = args.num_envs // world_size
    elif args.num_envs is not None and args.num_envs != args.local_num_envs * world_size:
        fail(
            f"--num-envs {args.num_envs} and --local-num-envs {args.local_num_envs} disagree: with world size "
            f"{world_size}, --num-envs must be {args.local_num_envs * world_size} (or give only one of them)"
        )
    args.world_size = world_size
    args.num_envs = args.local_num_envs * world_size
    args.local_batch_size = args.local_num_envs * args.num_steps
    args.batch_size = args.local_batch_size * world_size
    if args.local_batch_size % args.num_minibatches != 0:
        fail(
            f"the batch of each rank, local_num_envs*num_steps = {args.local_num_envs}*{args.num_steps} = "
            f"{args.local_batch_size}, is not divisible by --num-minibatches {args.num_minibatches}"
        )
    if args.total_timesteps < args.batch_size:
        fail(
            f"--total-timesteps {args.total_timesteps} is smaller than one batch of all ranks (num_envs*num_steps = "
            f"{args.num_envs}*{args.num_steps} = {args.batch_size}): no update would run"
        )
    args.local_minibatch_size = args.local_batch_size // args.num_minibatches
    args.minibatch_size = args.local_minibatch_size * world_size
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.torch_threads is not None:
        check_positive(torch_threads=args.torch_threads)
    check_positive(dist_timeout=args.dist_timeout)
    if args.checkpoint_interval < 0:
        fail(f"--checkpoint-interval must be >= 0 (0: only at the end), got {args.checkpoint_interval}")


def resolve_device(args: Args, info: DistInfo) -> tuple[torch.device, str]:
    """This rank's device and the backend; fails (on every rank, before any communication) on impossible choices."""
    has_cuda = args.cuda and torch.cuda.is_available()
    backend = args.backend or ("nccl" if has_cuda else "gloo")
    if backend == "nccl" and not has_cuda:
        why = "--no-cuda was given" if not args.cuda else "torch sees no CUDA device on this machine"
        fail(f"--backend nccl needs a CUDA device on every rank ({why}); use --backend gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        fail("--backend mpi needs a PyTorch built with MPI (this one is not); use --backend gloo or nccl")
    if args.device_ids is not None:
        if len(args.device_ids) != info.local_world_size:
            fail(
                f"--device-ids has {len(args.device_ids)} entries but this node runs {info.local_world_size} ranks: "
                "give one CUDA device id per local rank (e.g. `--device-ids 0 0 1 1` for 4 ranks on 2 GPUs)"
            )
        if not has_cuda:
            fail("--device-ids places ranks on CUDA devices, but CUDA is off or there is no CUDA device here")
        bad = [d for d in args.device_ids if not 0 <= d < torch.cuda.device_count()]
        if bad:
            fail(f"--device-ids {bad} do not exist: this machine has {torch.cuda.device_count()} CUDA devices")
    if not has_cuda:
        return torch.device("cpu"), backend
    index = args.device_ids[info.local_rank] if args.device_ids else info.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index), backend


def restart_count() -> int:
    """torchrun's restart attempt as this node's agent counts it (a node whose own workers were healthy says 0)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def resolve_run_name(args: Args, restarted: bool) -> str:
    """The run's folder name, decided by rank 0 before anything is written.

    A restarted torchrun group (a restart count > 0 on any rank) must land in the folder of its first attempt, whose
    timestamped name it cannot recompute: each run folder records the TORCHELASTIC_RUN_ID it was started under
    (file `elastic_run_id`; torchrun keeps that id over restarts), and a restart takes the newest folder of this
    env/exp/seed with its id. `--resume` without `--run-name` takes the newest folder of this env/exp/seed that has
    a checkpoint. `--run-name` is never second-guessed (the safe choice for multi-node or requeued cluster jobs).
    """
    if args.run_name:
        return args.run_name
    prefix = f"{args.env_id}__{args.exp_name}__{args.seed}__".replace("/", "-")
    candidates = []
    if os.path.isdir(args.runs_dir):
        candidates = [os.path.join(args.runs_dir, d) for d in os.listdir(args.runs_dir) if d.startswith(prefix)]
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if restarted and elastic_id:
        mine = [c for c in candidates if _read_text(os.path.join(c, "elastic_run_id")) == elastic_id]
        if mine:
            return os.path.basename(max(mine, key=os.path.getmtime))
    if args.resume:
        with_checkpoint = [c for c in candidates if os.path.exists(os.path.join(c, "checkpoint.pt"))]
        if with_checkpoint:
            return os.path.basename(max(with_checkpoint, key=lambda c: os.path.getmtime(c + "/checkpoint.pt")))
    return f"{prefix}{int(time.time())}"


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def make_vector_env(args: Args, run_name: Optional[str], rank: int, env_threads: int = 0) -> gym.vector.VectorEnv:
    """This rank's `local_num_envs` games (only rank 0 may record a video)."""
    return make_atari_vector_env(
        args.vector_env, args.env_id, args.local_num_envs, env_threads=env_threads,
        seed=args.seed + rank * args.local_num_envs, capture_video=args.capture_video and rank == 0,
        run_name=run_name or "",
    )


def episode_stats(infos: dict) -> list[tuple[float, int]]:
    """(return, length) of every full game that ended on this step (SAME_STEP autoreset: see ppo_atari.py)."""
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
    """The Nature CNN with a policy and a value head, uint8 input, channels_last convolutions (see ppo_atari.py)."""

    def __init__(self, envs):
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
        self.to(memory_format=torch.channels_last)

    def hidden(self, x):
        x = x.contiguous(memory_format=torch.channels_last).to(torch.float32).div_(255.0)  # layout, then float
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
    """Generalized advantage estimation over a rollout of shape [num_steps, num_envs] (see ppo_atari.py)."""
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


def collect_rollout(envs, agent, next_obs, next_done, obs, actions, logprobs, rewards, dones, values, device):
    """Step this rank's vector env `num_steps` times with the policy, filling the buffers in place."""
    episodes = []
    for step in range(obs.shape[0]):
        obs[step] = next_obs
        dones[step] = next_done
        with torch.inference_mode():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob

        next_obs_np, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
        rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
        next_obs = torch.as_tensor(next_obs_np, device=device)
        next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
        episodes += episode_stats(infos)
    return next_obs, next_done, episodes


def all_reduce_gradients(params: list[torch.Tensor], world_size: int) -> None:
    """Average the gradients over the ranks with ONE all-reduce of a flattened copy (gloo has no AVG op)."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(world_size)
    for grad, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        grad.copy_(synced)


def normalize_advantages(adv: torch.Tensor, world_size: int) -> torch.Tensor:
    """(adv - mean) / (std + 1e-8), with the mean and (unbiased) std of the minibatch of ALL ranks."""
    if world_size == 1:
        return (adv - adv.mean()) / (adv.std() + 1e-8)
    a = adv.double()
    moments = torch.stack([a.sum(), (a * a).sum(), torch.tensor(float(len(a)), dtype=torch.float64, device=a.device)])
    dist.all_reduce(moments, op=dist.ReduceOp.SUM)
    total, total_sq, n = moments.unbind()
    mean = total / n
    std = ((total_sq - n * mean * mean) / (n - 1)).clamp_min(0).sqrt()
    return (adv - mean.float()) / (std.float() + 1e-8)


def minibatch_schedule(batch_size: int, num_minibatches: int, update_epochs: int):
    """Per epoch, the index arrays of its minibatches (shuffled with numpy's global RNG, lazily, as ppo_atari.py)."""
    b_inds = np.arange(batch_size)
    size = batch_size // num_minibatches
    for _ in range(update_epochs):
        np.random.shuffle(b_inds)
        yield [b_inds[start : start + size] for start in range(0, batch_size, size)]


def ppo_update(
    agent, optimizer, args, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values, epochs, world_size
):
    """The PPO epochs on this rank's share of the batch; `epochs` yields, per epoch, the minibatch index arrays.

    Every rank must run the same number of minibatches: each makes two collective calls (advantage moments,
    gradients) and, with --target-kl, one per epoch (the mean approx_kl that decides the early stop on all ranks).
    Returns the last minibatch's losses and the mean clip fraction of this rank.
    """
    params = list(agent.parameters())
    clipfracs = []
    for minibatches in epochs:
        for mb_inds in minibatches:
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
                mb_advantages = normalize_advantages(mb_advantages, world_size)

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
            if world_size > 1:
                all_reduce_gradients(params, world_size)
            nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            optimizer.step()

        if args.target_kl is not None:
            kl = approx_kl.detach().clone()
            if world_size > 1:
                dist.all_reduce(kl, op=dist.ReduceOp.SUM)
                kl /= world_size
            if kl > args.target_kl:
                break
    return {
        "value_loss": v_loss.item(),
        "policy_loss": pg_loss.item(),
        "entropy": entropy_loss.item(),
        "old_approx_kl": old_approx_kl.item(),
        "approx_kl": approx_kl.item(),
        "clipfrac": float(np.mean(clipfracs)),
    }


def broadcast_parameters(agent: nn.Module, world_size: int) -> None:
    """Give every rank rank 0's parameters, in one broadcast of a flattened copy."""
    if world_size == 1:
        return
    params = [p.data for p in agent.parameters()]
    flat = torch._utils._flatten_dense_tensors(params)
    dist.broadcast(flat, src=0)
    for param, synced in zip(params, torch._utils._unflatten_dense_tensors(flat, params)):
        param.copy_(synced)


def param_hash(state_dict: dict) -> str:
    """sha256 of the parameter values (name order, standard layout): equal hashes mean bit-identical models."""
    digest = hashlib.sha256()
    for name, tensor in state_dict.items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def rng_state(device: torch.device) -> dict:
    """This rank's RNG states, in types `torch.load(weights_only=True)` accepts."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def save_checkpoint(path: str, agent, optimizer, args: Args, iteration: int, global_step: int, rngs, recent_returns):
    """Write the checkpoint to a temporary file, then rename it over the old one (never a half-written file)."""
    tmp = path + ".tmp"
    torch.save(
        {
            "format": CHECKPOINT_FORMAT,
            "env_id": args.env_id,
            "exp_name": args.exp_name,
            "batch_size": args.batch_size,
            "num_iterations": args.num_iterations,
            "world_size": args.world_size,
            "iteration": iteration,
            "global_step": global_step,
            "log_step": global_step,
            "model": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rngs,
            "recent_returns": list(recent_returns),
        },
        tmp,
    )
    os.replace(tmp, path)


def load_checkpoint(path: str, agent: nn.Module, args: Args) -> dict:
    """Read and check a checkpoint on rank 0; every problem is a one-line `fail`."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip, garbage, or pickled objects that weights_only refuses
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        fail(f"cannot read the checkpoint {path} ({reason}); it is corrupt or not from this script: remove it")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "model" not in ckpt:
        fail(f"{path} is not a checkpoint of ppo_atari_multigpu.py (format {CHECKPOINT_FORMAT}); remove it")
    if ckpt.get("env_id") != args.env_id:
        fail(f"the checkpoint {path} was made for {ckpt.get('env_id')}, not --env-id {args.env_id}")
    own, theirs = agent.state_dict(), ckpt["model"]
    if not isinstance(theirs, dict):
        fail(f"the checkpoint {path} has no model state dict; remove it")
    for name in sorted(set(own) | set(theirs)):
        mine = tuple(own[name].shape) if name in own else None
        other = tuple(theirs[name].shape) if name in theirs and isinstance(theirs[name], torch.Tensor) else None
        if mine != other:
            fail(
                f"the checkpoint {path} holds another network architecture than this script's Agent for "
                f"{args.env_id} (parameter {name}: {other} in the checkpoint, {mine} here)"
            )
    if (ckpt.get("batch_size"), ckpt.get("num_iterations")) != (args.batch_size, args.num_iterations):
        fail(
            f"the checkpoint {path} is of a run with batch {ckpt.get('batch_size')} x {ckpt.get('num_iterations')} "
            f"iterations, this one has {args.batch_size} x {args.num_iterations}: resume with the same --num-envs, "
            "--num-steps and --total-timesteps"
        )
    return ckpt


def setup_on_rank0(args: Args, run_name: str, agent: nn.Module, restart: int) -> dict:
    """Rank 0's part of the start: the run directory and the checkpoint to resume, if any (may `fail`)."""
    run_dir = prepare_run_dir(os.path.join(args.runs_dir, run_name))
    path = os.path.join(run_dir, "checkpoint.pt")
    ckpt = None
    if os.path.exists(path):
        if not (args.resume or restart > 0):
            fail(f"{run_dir} already has a checkpoint: pass --resume to continue that run, or another --run-name")
        ckpt = load_checkpoint(path, agent, args)
    elif args.resume or restart > 0:
        print(f"note: no checkpoint in {run_dir}: starting from scratch", file=sys.stderr, flush=True)
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic_id and elastic_id != "none":
        with open(os.path.join(run_dir, "elastic_run_id"), "w") as f:
            f.write(elastic_id)
    return {"run_dir": run_dir, "checkpoint_path": path, "checkpoint": ckpt, "restart": restart}


def gather_to_all(obj, world_size: int) -> list:
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def save_model(path: str, agent: nn.Module, args: Args) -> None:
    """Weights plus what is needed to rebuild and check the agent (the format of ppo_atari.py's models)."""
    tmp = path + ".tmp"
    torch.save({"model": agent.state_dict(), "env_id": args.env_id, "exp_name": args.exp_name}, tmp)
    os.replace(tmp, path)


STOP = {"signal": 0, "at": 0.0}


def _on_signal(signum, frame):
    """First SIGTERM/SIGINT: finish the iteration, checkpoint and exit. A 2nd Ctrl-C, 2 s or more later: quit now.

    (torchrun forwards the terminal's Ctrl-C to its workers at once, hence the 2 s: that copy is not a 2nd press.)
    """
    if STOP["signal"] and signum == signal.SIGINT and time.time() - STOP["at"] > 2:
        raise KeyboardInterrupt
    if not STOP["signal"]:
        STOP["signal"], STOP["at"] = signum, time.time()
        print("\nstopping at the end of this iteration (a checkpoint will be saved)", file=sys.stderr, flush=True)


def init_distributed(backend: str, info: DistInfo, timeout: timedelta) -> None:
    """Join the process group; under torchrun, with keys of this restart attempt only.

    torchrun's agent keeps one TCP store for all restarts of a job, with the keys of a failed attempt still in it
    (pytorch/pytorch#135712, #167288): a restarted rank may read the address of its dead predecessor and fail or
    hang. A prefix per attempt gives every attempt fresh keys. The attempt number is the same on all ranks of one
    node; torchrun does not raise it on a node whose workers were healthy, so across nodes launch torchrun with
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (rank 0 then hosts a new store for each attempt and this is not needed).
    """
    if backend == "mpi" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout)
        return
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"ppo_atari_multigpu/attempt{attempt}/", store)
    dist.init_process_group(backend, store=store, rank=info.rank, world_size=info.world_size, timeout=timeout)


def cpu_seconds() -> float:
    """CPU time of this process and its children (the async env workers)."""
    me = psutil.Process()
    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])


def is_dist_error(exc: BaseException) -> bool:
    return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and "gloo" in str(exc).lower())


def leave(exit_code: int, exc: Optional[BaseException]) -> NoReturn:
    """Exit a distributed run at once, skipping the interpreter's teardown (logs, writer and checkpoint are closed).

    When a peer fails, a gloo worker thread may still be finishing the collective it broke; if it drops that
    collective's tensors while the interpreter is being torn down, it can't take the GIL and the process aborts
    ("terminate called without an active exception", SIGABRT) instead of exiting with its code: seen in about 1
    run in 10 of a rank whose peer failed (core dump: ProcessGroupGloo::runLoop -> ~AsyncBroadcastWork -> decref
    -> take_gil during Py_FinalizeEx). `os._exit` ends all threads together. `exc` is the exception on its way out
    (a `fail(...)` message, a bug), reported as Python would report it.
    """
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            exit_code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            exit_code = 1
    elif exc is not None:
        traceback.print_exception(exc)
        exit_code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    args = tyro.cli(Args)
    info = read_dist_env()
    rank0 = info.rank == 0

    # everything that can be checked is checked here, on every rank, before the ranks wait for each other
    resolve_sizes(args, info.world_size)
    check_atari_env_id(args.env_id)
    device, backend = resolve_device(args, info)
    if args.capture_video:
        try:
            import moviepy  # noqa: F401
        except ImportError:
            fail("--capture-video needs moviepy: pip install -e '.[video]'")
    if args.track and rank0:
        try:
            import wandb
        except ImportError:
            fail("--track needs wandb: pip install -e '.[track]'")
    if args.env_threads < 0:
        fail("--env-threads must be >= 0 (0: sized to the machine)")
    check_backend(args.vector_env, args.local_num_envs, capture_video=args.capture_video)
    threads = plan_threads(args.local_num_envs, args.env_threads, args.torch_threads or 0, info.local_world_size)
    use_threads(threads.learning_threads)

    keep_freed_memory()  # no page faults for the big tensors of every minibatch (cleanrl_utils/malloc.py)

    # TRY NOT TO MODIFY: seeding (rank 0 of a 1-process run draws exactly like ppo_atari.py)
    random.seed(args.seed + info.rank)
    np.random.seed(args.seed + info.rank)
    torch.manual_seed(args.seed + info.rank)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    run_name = resolve_run_name(args, restart_count() > 0) if rank0 else None
    # the envs come before the process group: async envs then fork no communication threads
    envs = make_vector_env(args, run_name, info.rank, threads.env_threads)
    writer = None
    exit_code = 0
    try:
        if info.launched:
            try:
                init_distributed(backend, info, timedelta(seconds=args.dist_timeout))
            except Exception as exc:
                fail(f"rank {info.rank}: the process group did not form ({str(exc).strip().splitlines()[0][:300]})")
        agent = Agent(envs).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # a restart if ANY rank's agent counted one (across nodes the counts differ): then resume
        restart = max(gather_to_all(restart_count(), info.world_size))
        if rank0 and restart > restart_count():
            run_name = resolve_run_name(args, True)

        # rank 0 prepares the run directory and reads the checkpoint; all ranks learn the outcome, so a bad
        # checkpoint stops every rank with the same one-line error instead of leaving some waiting
        if rank0:
            try:
                setup = {"ok": True, **setup_on_rank0(args, run_name, agent, restart), "run_name": run_name}
            except SystemExit as exc:
                setup = {"ok": False, "error": str(exc.code)}
        else:
            setup = None
        if info.world_size > 1:
            box = [setup]
            dist.broadcast_object_list(box, src=0)
            setup = box[0]
        if not setup["ok"]:
            raise SystemExit(setup["error"])  # the same one-line error on every rank
        run_name, run_dir, ckpt = setup["run_name"], setup["run_dir"], setup["checkpoint"]

        start_iteration, global_step, recent_returns = 0, 0, []
        if ckpt is not None:
            agent.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            start_iteration, global_step = ckpt["iteration"], ckpt["global_step"]
            recent_returns = ckpt["recent_returns"]
            if len(ckpt["rng"]) == info.world_size:
                set_rng_state(ckpt["rng"][info.rank], device)
            else:  # another world size: new, deterministic streams
                random.seed(args.seed + info.rank + 1000 * start_iteration)
                np.random.seed(args.seed + info.rank + 1000 * start_iteration)
                torch.manual_seed(args.seed + info.rank + 1000 * start_iteration)
        broadcast_parameters(agent, info.world_size)  # identical start on every rank

        if rank0:
            how = f"{backend}, {device.type}, per rank {threads.describe()}"
            print(
                f"run {run_name}: world size {info.world_size} ({how}); envs: {args.local_num_envs} per rank, "
                f"{args.num_envs} in all ({args.vector_env}); batch {args.batch_size} ({args.local_batch_size} per "
                f"rank), minibatch {args.minibatch_size} ({args.local_minibatch_size} per rank), "
                f"{args.num_iterations} iterations; logs in {run_dir}",
                flush=True,
            )
            multi_node = info.world_size != info.local_world_size
            if multi_node and int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0 and (
                os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            ):
                print(
                    "note: for restarts across nodes, launch torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
                    "(see init_distributed)",
                    flush=True,
                )
            if not info.launched:
                print(
                    "note: single process; to train data-parallel on N processes (GPUs), launch with "
                    "`torchrun --standalone --nnodes=1 --nproc_per_node=N cleanrl/ppo_atari_multigpu.py ...`",
                    flush=True,
                )
            if ckpt is not None:
                again = f" (torchrun restart {setup['restart']})" if setup["restart"] else ""
                print(f"resuming from iteration {start_iteration} (global step {global_step}){again}", flush=True)
            if args.track:
                import wandb

                wandb.init(
                    project=args.wandb_project_name,
                    entity=args.wandb_entity,
                    sync_tensorboard=True,
                    config=vars(args),
                    name=run_name,
                    id=run_name.replace("/", "-"),
                    resume="allow",
                    monitor_gym=True,
                    save_code=True,
                )
            from torch.utils.tensorboard import SummaryWriter  # rank 0 only: the import costs ~1.5 s of CPU

            # purge_step hides what a crashed attempt logged after the checkpoint: the curves stay continuous
            writer = SummaryWriter(run_dir, purge_step=global_step + 1 if ckpt is not None else None)
            if ckpt is None:
                writer.add_text(
                    "hyperparameters",
                    "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
                )
        ckpt = setup = None

        # ALGO Logic: Storage setup; observations stay uint8 until the network, stored with the frames last in
        # memory (channels_last, the network's layout; indexed as (step, env, frame, height, width))
        shape = (args.num_steps, args.local_num_envs)
        frames, height, width = envs.single_observation_space.shape
        obs = torch.zeros(shape + (height, width, frames), dtype=torch.uint8, device=device).permute(0, 1, 4, 2, 3)
        actions = torch.zeros(shape + envs.single_action_space.shape, dtype=torch.long).to(device)
        logprobs = torch.zeros(shape).to(device)
        rewards = torch.zeros(shape).to(device)
        dones = torch.zeros(shape).to(device)
        values = torch.zeros(shape).to(device)

        # TRY NOT TO MODIFY: start the game. Env i of rank r has seed `seed + global env index` (+ num_envs *
        # iteration after a resume: the emulator states are not in the checkpoint, so the games start anew)
        start_time, start_cpu, start_step, games = time.time(), cpu_seconds(), global_step, 0
        reset_seed = args.seed + info.rank * args.local_num_envs + start_iteration * args.num_envs
        next_obs, _ = envs.reset(seed=reset_seed)
        next_obs = torch.as_tensor(next_obs, device=device)
        next_done = torch.zeros(args.local_num_envs).to(device)
        progress = tqdm(
            total=args.num_iterations * args.batch_size,
            initial=global_step,
            unit="step",
            disable=not (rank0 and args.progress_bar and sys.stdout.isatty()),
            dynamic_ncols=True,
        )
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        try:
            for iteration in range(start_iteration + 1, args.num_iterations + 1):
                # Annealing the rate if instructed to do so.
                if args.anneal_lr:
                    frac = 1.0 - (iteration - 1.0) / args.num_iterations
                    lrnow = frac * args.learning_rate
                    optimizer.param_groups[0]["lr"] = lrnow

                # ROLLOUT (each rank its own envs)
                use_threads(threads.inference_threads)
                next_obs, next_done, episodes = collect_rollout(
                    envs, agent, next_obs, next_done, obs, actions, logprobs, rewards, dones, values, device
                )
                use_threads(threads.learning_threads)

                # ADVANTAGE: bootstrap value if not done
                with torch.inference_mode():
                    next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages, returns = compute_gae(
                    rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda
                )

                # flatten the batch
                b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
                b_logprobs = logprobs.reshape(-1)
                b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
                b_advantages = advantages.reshape(-1)
                b_returns = returns.reshape(-1)
                b_values = values.reshape(-1)

                # UPDATE: optimizing the policy and value network, gradients averaged over the ranks
                epochs = minibatch_schedule(args.local_batch_size, args.num_minibatches, args.update_epochs)
                stats = ppo_update(
                    agent, optimizer, args, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values,
                    epochs, info.world_size,
                )  # fmt: skip

                # one collective per iteration: every rank's games, losses, value fit and stop request
                report = (episodes, stats, b_values.cpu().numpy(), b_returns.cpu().numpy(), STOP["signal"])
                reports = gather_to_all(report, info.world_size)
                global_step += args.batch_size
                games += len(episodes)
                stop = any(r[4] for r in reports)

                if rank0:
                    for rank_episodes, *_ in reports:
                        for episodic_return, episodic_length in rank_episodes:
                            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                            writer.add_scalar("charts/episodic_length", episodic_length, global_step)
                            recent_returns = (recent_returns + [episodic_return])[-20:]
                    y_pred = np.concatenate([r[2] for r in reports])
                    y_true = np.concatenate([r[3] for r in reports])
                    var_y = np.var(y_true)
                    explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

                    # LOGGING: losses are the mean over the ranks of each rank's last minibatch
                    sps = int((global_step - start_step) / (time.time() - start_time))
                    writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                    for key in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"):
                        writer.add_scalar(f"losses/{key}", float(np.mean([r[1][key] for r in reports])), global_step)
                    writer.add_scalar("losses/explained_variance", explained_var, global_step)
                    writer.add_scalar("charts/SPS", sps, global_step)
                    progress.update(args.batch_size)
                    progress.set_postfix(SPS=sps, ret=f"{np.mean(recent_returns):.1f}" if recent_returns else "-")

                due = args.checkpoint_interval > 0 and iteration % args.checkpoint_interval == 0
                if due or stop or iteration == args.num_iterations:
                    rngs = [None] * info.world_size if rank0 else None
                    if info.world_size > 1:
                        dist.gather_object(rng_state(device), rngs, dst=0)
                    else:
                        rngs = [rng_state(device)]
                    if rank0:
                        writer.flush()  # logged steps up to the checkpoint must be on disk before it
                        path = os.path.join(run_dir, "checkpoint.pt")
                        save_checkpoint(path, agent, optimizer, args, iteration, global_step, rngs, recent_returns)
                        print(f"checkpoint: iteration {iteration}, global step {global_step}", flush=True)
                if stop:
                    exit_code = 128 + (STOP["signal"] or signal.SIGTERM)
                    if rank0:
                        print(
                            f"stopped after iteration {iteration} (global step {global_step}); resume with "
                            f"--resume --run-name {run_name}",
                            file=sys.stderr,
                            flush=True,
                        )
                    break
        finally:
            progress.close()

        wall, cpu, steps = time.time() - start_time, cpu_seconds() - start_cpu, global_step - start_step
        if rank0:
            print(f"done: {steps} steps in {wall:.1f} s, SPS {int(steps / wall)}", flush=True)
        usage = f"{cpu:.1f} s CPU in {wall:.1f} s = {cpu / wall:.2f} cores busy"
        print(f"rank {info.rank}/{info.world_size}: {usage}", flush=True)

        # every rank reports the hash of its parameters (and the games its envs finished); rank 0 checks the hashes
        digest = param_hash(agent.state_dict())
        print(f"rank {info.rank}/{info.world_size}: parameters sha256 {digest}, {games} games finished", flush=True)
        digests = gather_to_all(digest, info.world_size)
        if rank0 and info.world_size > 1:
            if len(set(digests)) == 1:
                print(f"parameters identical on all {info.world_size} ranks", flush=True)
            else:
                print("warning: the ranks' parameters differ (see the hashes above)", file=sys.stderr, flush=True)
        if rank0 and args.save_model:
            model_path = f"{run_dir}/{args.exp_name}.cleanrl_model"
            save_model(model_path, agent, args)
            print(f"model saved to {model_path}", flush=True)
        if info.world_size > 1:
            dist.barrier()  # leave together: no rank tears down its connections while rank 0 still saves
    except KeyboardInterrupt:
        print(f"\nrank {info.rank}: interrupted; the last checkpoint is kept", file=sys.stderr)
        exit_code = 130
    except Exception as exc:
        if not is_dist_error(exc):
            raise
        fail(
            f"rank {info.rank}: lost contact with the other ranks ({str(exc).strip().splitlines()[0][:300]}); "
            "a rank died or --dist-timeout passed. Resume with --resume"
        )
    finally:
        envs.close()
        if writer is not None:
            writer.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        if info.launched:
            leave(exit_code, sys.exc_info()[1])
    sys.exit(exit_code)
