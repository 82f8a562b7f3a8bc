"""cleanrl_utils/distributed.py without GPUs: the device and backend of each rank with the CUDA device count mocked
(ranks sharing a GPU), what init_process_group is given per backend and launcher, the nccl error handling set before
it, a real 2-rank gloo group formed under mpirun's variables, and which rank prints an error that every rank finds."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
import torch
import tyro
from helpers import REPO_ROOT, assert_one_line_error, run_script

from cleanrl_utils import distributed, validation


@pytest.fixture(autouse=True)
def no_nccl_choice(monkeypatch):
    for name in distributed.NCCL_ERROR_VARIABLES:  # a test sets its own
        monkeypatch.delenv(name, raising=False)


def gpus(monkeypatch, count: int) -> None:
    """A machine with `count` CUDA devices, as far as resolve_device asks; making one current is an error."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    def no_set_device(device):
        raise AssertionError("resolve_device made a device current")

    monkeypatch.setattr(torch.cuda, "set_device", no_set_device)


def device_args(*argv: str):
    from helpers import load_script

    script = load_script("cleanrl/ppo_atari_multigpu.py", "ppo_atari_multigpu_for_distributed_tests")
    return tyro.cli(script.Args, args=list(argv))


def ranks_of_node(local_world_size: int, *argv: str, count: int, monkeypatch, capsys):
    """(device, backend) of every local rank of a node, and what they printed."""
    gpus(monkeypatch, count)
    args = device_args(*argv)
    placed = []
    for local_rank in range(local_world_size):
        info = distributed.DistInfo(local_rank, local_world_size, local_rank, local_world_size, True, "torchrun")
        placed.append(distributed.resolve_device(args, info))
    return placed, capsys.readouterr()


def test_one_rank_per_gpu_is_nccl_on_its_own_device(monkeypatch, capsys):
    placed, out = ranks_of_node(2, count=2, monkeypatch=monkeypatch, capsys=capsys)
    assert placed == [(torch.device("cuda", 0), "nccl"), (torch.device("cuda", 1), "nccl")]
    assert out.out == "" and out.err == ""


def test_ranks_sharing_a_gpu_fall_back_to_gloo_with_one_note(monkeypatch, capsys):
    placed, out = ranks_of_node(2, count=1, monkeypatch=monkeypatch, capsys=capsys)
    assert placed == [(torch.device("cuda", 0), "gloo")] * 2
    assert out.out.splitlines() == [
        "note: local ranks 0, 1 share cuda:0, which nccl does not allow: using gloo (all-reduce through host memory)"
    ]


def test_device_ids_given_twice_share_a_gpu(monkeypatch, capsys):
    placed, out = ranks_of_node(4, "--device-ids", "1", "1", "0", "0", count=2, monkeypatch=monkeypatch, capsys=capsys)
    assert [device.index for device, _ in placed] == [1, 1, 0, 0]
    assert {backend for _, backend in placed} == {"gloo"}
    assert "local ranks 2, 3 share cuda:0" in out.out
    placed, _ = ranks_of_node(2, "--device-ids", "1", "0", count=2, monkeypatch=monkeypatch, capsys=capsys)
    assert placed == [(torch.device("cuda", 1), "nccl"), (torch.device("cuda", 0), "nccl")]


def test_explicit_nccl_on_a_shared_gpu_is_a_one_line_error(monkeypatch, capsys):
    gpus(monkeypatch, 1)
    args = device_args("--backend", "nccl")
    info = distributed.DistInfo(1, 2, 1, 2, True, "torchrun")
    with pytest.raises(SystemExit) as exit_info:
        distributed.resolve_device(args, info)
    message = str(exit_info.value.code)
    assert message.startswith("error: --backend nccl cannot place two ranks on one GPU") and "\n" not in message
    assert "local ranks 0, 1 share cuda:0" in message and "leave out --backend" in message


def test_counts_of_one_are_singular(monkeypatch, capsys):
    """ "1 ranks", "1 CUDA devices" read as typos in a line that tells the user what to change."""
    gpus(monkeypatch, 1)
    info = distributed.DistInfo(0, 1, 0, 1, True, "torchrun")
    for argv, said in (
        (["--device-ids", "0", "0"], "--device-ids has 2 entries but this node runs 1 rank: give one"),
        (["--device-ids", "3"], "--device-ids [3] do not exist: this machine has 1 CUDA device"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            distributed.resolve_device(device_args(*argv), info)
        assert str(exit_info.value.code).startswith(f"error: {said}")


def test_explicit_gloo_on_gpus_stays_gloo_without_a_note(monkeypatch, capsys):
    placed, out = ranks_of_node(2, "--backend", "gloo", count=1, monkeypatch=monkeypatch, capsys=capsys)
    assert placed == [(torch.device("cuda", 0), "gloo")] * 2 and out.out == ""


class Recorded:
    """Stands in for dist.init_process_group: records its arguments and the nccl variables it would read."""

    def __init__(self):
        self.calls = []

    def __call__(self, backend, **kwargs):
        blocking = os.environ.get("TORCH_NCCL_BLOCKING_WAIT")
        self.calls.append((backend, kwargs, blocking))


@pytest.fixture
def recorded(monkeypatch):
    rec = Recorded()
    monkeypatch.setattr(distributed.dist, "init_process_group", rec)
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    rec.current = current
    return rec


INFO = distributed.DistInfo(1, 2, 1, 2, True, "torchrun")
TIMEOUT = timedelta(seconds=5)


def test_nccl_forms_the_group_on_the_device_and_raises_on_failed_collectives(recorded):
    device = torch.device("cuda", 1)
    distributed.init_distributed("nccl", INFO, TIMEOUT, device)
    assert recorded.current == [device]  # made current here, after the env workers started
    backend, kwargs, blocking = recorded.calls[0]
    assert backend == "nccl" and kwargs["device_id"] == device
    assert (kwargs["rank"], kwargs["world_size"], kwargs["timeout"]) == (1, 2, TIMEOUT)
    assert blocking == "1"


@pytest.mark.parametrize("variable", ["TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING"])
def test_the_users_nccl_error_handling_wins(recorded, monkeypatch, variable):
    monkeypatch.setenv(variable, "0")
    distributed.init_distributed("nccl", INFO, TIMEOUT, torch.device("cuda", 0))
    assert os.environ[variable] == "0"
    assert recorded.calls[0][2] == ("0" if variable == "TORCH_NCCL_BLOCKING_WAIT" else None)


def test_gloo_and_mpi_get_no_nccl_settings(recorded):
    distributed.init_distributed("gloo", INFO, TIMEOUT, torch.device("cpu"))
    distributed.init_distributed("mpi", INFO, TIMEOUT, torch.device("cpu"))
    (gloo, gloo_kwargs, blocking), (mpi, mpi_kwargs, _) = recorded.calls
    assert "device_id" not in gloo_kwargs and (gloo_kwargs["rank"], gloo_kwargs["world_size"]) == (1, 2)
    assert mpi == "mpi" and "rank" not in mpi_kwargs  # MPI knows the ranks
    assert blocking is None and recorded.current == []


class Writes(io.RawIOBase):
    """A raw stream that keeps every write it gets, as the file descriptor would."""

    def __init__(self):
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.writes.append(bytes(data))
        return len(data)


def test_a_ranks_prints_leave_as_whole_lines_with_unbuffered_output(recorded, monkeypatch):
    # PYTHONUNBUFFERED=1: the text layer writes through to an unbuffered binary layer
    streams = {name: Writes() for name in ("stdout", "stderr")}
    for name, raw in streams.items():
        monkeypatch.setattr(sys, name, io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    print("before the group", flush=True)
    assert streams["stdout"].writes == [b"before the group", b"\n"]  # what two ranks' lines could land between
    distributed.init_distributed("gloo", INFO, TIMEOUT, torch.device("cpu"))
    print("model saved to runs/r/ppo_atari_multigpu.cleanrl_model", flush=True)
    print("checkpoint: iteration 1,", "global step 64")
    print("error: a rank's last line", file=sys.stderr)
    assert streams["stdout"].writes[2:] == [
        b"model saved to runs/r/ppo_atari_multigpu.cleanrl_model\n",
        b"checkpoint: iteration 1, global step 64\n",
    ]
    assert streams["stderr"].writes == [b"error: a rank's last line\n"]


def test_a_single_process_sets_its_device_and_forms_no_group(recorded):
    distributed.init_distributed("nccl", distributed.DistInfo(), TIMEOUT, torch.device("cuda", 0))
    assert recorded.current == [torch.device("cuda", 0)] and recorded.calls == []


def test_mpirun_needs_master_addr_and_port_for_gloo(monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    info = distributed.DistInfo(0, 2, 0, 2, True, "mpirun")
    args = device_args("--no-cuda")
    with pytest.raises(SystemExit) as exit_info:
        distributed.resolve_device(args, info)
    message = str(exit_info.value.code)
    assert message.startswith("error: under mpirun the gloo backend meets at MASTER_ADDR:MASTER_PORT")
    assert "MASTER_ADDR and MASTER_PORT are not set" in message and "-x MASTER_PORT=29500" in message
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert distributed.resolve_device(args, info) == (torch.device("cpu"), "gloo")


GROUP_UNDER_MPIRUN = textwrap.dedent("""
    from datetime import timedelta
    import torch, torch.distributed as dist
    from cleanrl_utils import distributed
    info = distributed.read_dist_env()
    distributed.init_distributed("gloo", info, timedelta(seconds=60), torch.device("cpu"))
    total = torch.tensor([info.rank + 1.0])
    dist.all_reduce(total)
    print(info.launcher, info.rank, info.world_size, int(total.item()))
    dist.destroy_process_group()
""")


@pytest.mark.torchrun
def test_a_gloo_group_forms_under_mpiruns_variables():
    """Open MPI's variables only (no RANK/WORLD_SIZE): the ranks are given to init_process_group."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK=str(rank),
                   OMPI_COMM_WORLD_LOCAL_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")  # fmt: skip
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", GROUP_UNDER_MPIRUN],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert [out.strip().splitlines()[-1] for out in outputs] == ["mpirun 0 2 3", "mpirun 1 2 3"]


def test_errors_every_rank_finds_are_printed_by_the_first_rank_of_each_node(tmp_path):
    """Two ranks of a 2-node job (2 ranks a node) on an input every rank refuses before the group forms: both stop;
    rank 1 (its node's second) silently, rank 2 (the second node's first) with the error line."""
    for rank, local_rank in ((1, 1), (2, 0)):
        env = dict(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE="2")
        result = run_script(["cleanrl/ppo_atari_multigpu.py", "--num-envs", "3"], tmp_path, 120, env)
        assert result.returncode == 1, result.stderr[-2000:]
        if local_rank:
            assert result.stdout + result.stderr == ""
        else:
            assert_one_line_error(result, "--num-envs 3 is not divisible by the world size 4")


def test_a_node_s_later_ranks_show_crashes_and_speak_again_once_the_group_forms(recorded, monkeypatch):
    for name in ("stdout", "stderr", "excepthook", "__stdout__", "__stderr__"):
        monkeypatch.setattr(sys, name, getattr(sys, name))  # put back after the test
    sys.__stderr__ = terminal = io.StringIO()
    distributed.hush_until_grouped(INFO)
    assert sys.stdout is sys.stderr is distributed.HUSHED
    try:  # a crash (not a checked error: the node's first rank prints those) still shows its traceback
        raise ValueError("a fault of this rank alone")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert "ValueError: a fault of this rank alone" in terminal.getvalue()
    distributed.init_distributed("gloo", INFO, TIMEOUT, torch.device("cpu"))
    assert (sys.stdout, sys.stderr) == (sys.__stdout__, sys.__stderr__)


def test_rank0s_decision_fails_loudly_on_rank0_only():
    def decide():
        validation.fail("cannot read the checkpoint")

    with pytest.raises(SystemExit) as exit_info:
        distributed.decided_on_rank0(decide, distributed.DistInfo())
    assert exit_info.value.code == "error: cannot read the checkpoint"


@pytest.mark.torchrun
@pytest.mark.slow
def test_a_killed_rank_gives_one_error_line_from_the_rank_that_lost_it(tmp_path):
    """Under torchrun (no restarts), rank 1 killed mid-run: the survivor prints the one error line, nothing else
    prints one; torchrun's own report follows (docs/multigpu.md)."""
    from multigpu_helpers import QUIET, SCRIPT, TINY, TINY_BATCH, kill_rank1_after_checkpoint_3, torchrun

    log = tmp_path / "torchrun.log"
    cmd = torchrun(2) + TINY + QUIET + ["--total-timesteps", str(1000 * TINY_BATCH), "--checkpoint-interval", "3"]
    code = kill_rank1_after_checkpoint_3(cmd, tmp_path, log)
    output = log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert code != 0
    assert len(errors) == 1 and errors[0].startswith("error: rank 0: lost contact with the other ranks"), output
    run = next((tmp_path / "runs").iterdir()).name  # the message ends with the command that continues it
    assert "; resume with: torchrun --standalone --nnodes=1 --nproc_per_node=2 " in errors[0], output
    assert errors[0].endswith(f"{SCRIPT} --resume --run-name {run}"), output
    assert "Root Cause" in output and "Signal 9 (SIGKILL) received by PID" in output  # torchrun's report


@pytest.mark.gpu
@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.parametrize("ranks, backend", [(1, "nccl"), (2, "gloo")])
def test_ranks_on_one_gpu_train_on_cuda(tmp_path, gpu_env, ranks, backend):
    """On a machine with a GPU: 1 rank on nccl, and 2 ranks sharing GPU 0 on gloo with CUDA tensors, ending with
    identical parameters (each rank runs the script under benchmark/lab/rank_params.py, which hashes them)."""
    from multigpu_helpers import QUIET, TINY, assert_ranks_identical, torchrun

    cmd = [str(REPO_ROOT / a) if a.endswith(".py") else a for a in torchrun(ranks, hashes=tmp_path / "hashes")]
    cmd += TINY + QUIET + ["--total-timesteps", "128", "--cuda"]
    result = subprocess.run(
        [sys.executable, *cmd],
        cwd=tmp_path,
        env=dict(gpu_env, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"world size {ranks} ({backend}, cuda)" in output
    assert_ranks_identical(tmp_path / "hashes", ranks)
    if ranks == 2:
        assert "note: local ranks 0, 1 share cuda:0" in output
