"""cleanrl_utils/submit_exp.py: AWS Batch requests (validated against botocore's Batch model, offline, and sent to a
fake Batch endpoint), the missing-credentials path, secrets, local simulated nodes and a real two-node Slurm job."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import signal
import sys
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import botocore.session
import botocore.validate
import psutil
import pytest
import tyro

from cleanrl_utils import submit_exp
from helpers import REPO_ROOT, read_scalars, run_submit, start_script, wait_for

SUBMIT = "cleanrl_utils/submit_exp.py"
USER_COMMAND = "python cleanrl/ppo_atari_multigpu.py --env-id BeamRiderNoFrameskip-v4"
STANDIN = str(REPO_ROOT / "tests" / "dist_standin.py")
SECRET = "wandb-test-secret-7f3a9c1e"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:wandb-AbCdEf"
BATCH = botocore.session.get_session().get_service_model("batch")


def assert_valid_batch_request(operation: str, params: dict) -> None:
    report = botocore.validate.ParamValidator().validate(params, BATCH.operation_model(operation).input_shape)
    assert not report.has_errors(), f"{operation} request is invalid for AWS Batch:\n{report.generate_report()}"


def aws_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment without any AWS configuration (empty config files, no instance metadata) plus `extra`."""
    for name in ("aws_config", "aws_credentials"):
        (tmp_path / name).write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "aws_config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws_credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return env


def submit_here(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """submit_exp.py's `__main__` block (`main(tyro.cli(Args))`) run in this process with `args` as its argv, in `cwd`,
    its exit and output as the process's: a message of `SystemExit` goes to stderr with status 1. For the paths that
    check a command's flags: the training script they import loads torch once here, not once per case (~2 s each).
    The imported scripts' process-wide settings (OMP_WAIT_POLICY, the Ctrl-C handler) are put back afterwards."""
    out, err = io.StringIO(), io.StringIO()
    argv, here, sigint = sys.argv, os.getcwd(), signal.getsignal(signal.SIGINT)
    environ = dict(os.environ)
    code = 0
    try:
        sys.argv = [str(REPO_ROOT / SUBMIT), *args]
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                submit_exp.main(tyro.cli(submit_exp.Args))
            except SystemExit as exc:
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
                code = 1 if isinstance(exc.code, str) else exc.code or 0
    finally:
        sys.argv = argv
        os.chdir(here)
        signal.signal(signal.SIGINT, sigint)
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess(sys.argv, code, out.getvalue(), err.getvalue())


def one_error_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), (res.returncode, res.stderr)
    return lines[0]


def test_dry_run_prints_one_valid_multinode_job_per_seed(tmp_path):
    res = run_submit(
        [
            "--command",
            USER_COMMAND,
            "--num-seeds",
            "3",
            "--num-nodes",
            "4",
            "--instance-type",
            "c5.12xlarge",
            "--efs-file-system-id",
            "fs-0123456789abcdef0",
            "--efs-access-point-id",
            "fsap-0123456789abcdef0",
            "--dry-run",
        ],
        tmp_path,
        aws_env(tmp_path),  # a dry run needs no credentials
    )
    assert res.returncode == 0, res.stderr
    requests = json.loads(res.stdout)
    assert [r["operation"] for r in requests] == ["RegisterJobDefinition"] + ["SubmitJob"] * 3
    for r in requests:
        assert_valid_batch_request(r["operation"], r["params"])

    definition = requests[0]["params"]
    assert definition["type"] == "multinode"
    nodes = definition["nodeProperties"]
    assert (nodes["numNodes"], nodes["mainNode"]) == (4, 0)
    container = nodes["nodeRangeProperties"][0]["container"]
    assert container["instanceType"] == "c5.12xlarge"
    resources = {r["type"]: r["value"] for r in container["resourceRequirements"]}
    assert resources["VCPU"] == "48" and "GPU" not in resources and 80_000 < int(resources["MEMORY"]) < 96 * 1024
    # the run folders on EFS, through the access point (encrypted in transit, IAM), at the runs' --runs-dir
    assert container["volumes"] == [
        {
            "name": "runs",
            "efsVolumeConfiguration": {
                "fileSystemId": "fs-0123456789abcdef0",
                "transitEncryption": "ENABLED",
                "authorizationConfig": {"accessPointId": "fsap-0123456789abcdef0", "iam": "ENABLED"},
            },
        }
    ]
    assert container["mountPoints"] == [{"sourceVolume": "runs", "containerPath": "/mnt/runs", "readOnly": False}]
    # lost hosts (spot reclaim) retry, the script's own errors do not, anything else retries
    assert definition["retryStrategy"] == {
        "attempts": 4,
        "evaluateOnExit": [
            {"onStatusReason": "Host EC2*", "action": "RETRY"},
            {"onExitCode": "1", "action": "EXIT"},
            {"onExitCode": "2", "action": "EXIT"},
            {"onReason": "*", "action": "RETRY"},
        ],
    }

    for seed, r in zip((1, 2, 3), requests[1:]):
        submit = r["params"]
        assert submit["jobDefinition"] == definition["jobDefinitionName"]
        (override,) = submit["nodeOverrides"]["nodePropertyOverrides"]
        assert override["targetNodes"] == "0:"
        bash, flag, script = override["containerOverrides"]["command"]
        assert (bash, flag) == ("bash", "-c")
        last = script.splitlines()[-1]
        assert last.startswith(
            'exec torchrun --nnodes="$AWS_BATCH_JOB_NUM_NODES" --node-rank="$AWS_BATCH_JOB_NODE_INDEX" '
            "--nproc-per-node=1 --rdzv-backend=c10d"  # c5 has no GPU: one process per node
        ), last
        assert '--rdzv-endpoint="$MAIN_ADDR:29500"' in last
        # every attempt of a seed's run continues the same run folder on the volume
        assert last.endswith(
            f"cleanrl/ppo_atari_multigpu.py --env-id BeamRiderNoFrameskip-v4 --runs-dir /mnt/runs "
            f"--seed {seed} --run-name BeamRiderNoFrameskip-v4__ppo_atari_multigpu__{seed} "
            "--resume auto"
        )
        # the main node has no MAIN_NODE_PRIVATE_IPV4_ADDRESS and falls back to its own address
        assert "MAIN_ADDR=${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-$THIS_ADDR}" in script

    # the validation catches wrong names and types (so the checks above mean something)
    broken = copy.deepcopy(definition)
    broken["nodeProperties"]["nodeCount"] = broken["nodeProperties"].pop("numNodes")
    with pytest.raises(AssertionError, match="nodeCount"):
        assert_valid_batch_request("RegisterJobDefinition", broken)
    broken = copy.deepcopy(requests[1]["params"])
    broken["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]["command"] = "python x.py"
    with pytest.raises(AssertionError, match="command"):
        assert_valid_batch_request("SubmitJob", broken)


def test_single_node_gpu_job_with_secret_arn_is_valid(tmp_path):
    res = run_submit(
        [
            "--command",
            USER_COMMAND,
            "--instance-type",
            "p4d.24xlarge",
            "--num-retries",
            "2",
            "--dry-run",
            "--efs-file-system-id",
            "fs-0123456789abcdef0",
            "--efs-root-directory",
            "/cleanrl",
            "--efs-runs-dir",
            "/r",
            "--wandb-secret-arn",
            SECRET_ARN,
            "--execution-role-arn",
            "arn:aws:iam::123456789012:role/batch-exec",
        ],
        tmp_path,
        aws_env(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    requests = json.loads(res.stdout)
    for r in requests:
        assert_valid_batch_request(r["operation"], r["params"])
    definition, submit = requests[0]["params"], requests[1]["params"]
    assert definition["type"] == "container" and definition["retryStrategy"]["attempts"] == 3
    container = definition["containerProperties"]
    assert container["volumes"][0]["efsVolumeConfiguration"] == {
        "fileSystemId": "fs-0123456789abcdef0",
        "transitEncryption": "ENABLED",
        "rootDirectory": "/cleanrl",
    }
    assert container["mountPoints"][0]["containerPath"] == "/r"
    assert {r["type"]: r["value"] for r in container["resourceRequirements"]}["GPU"] == "8"
    assert container["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": SECRET_ARN}]
    script = submit["containerOverrides"]["command"][2]
    assert script.startswith("exec torchrun --standalone --nnodes=1 --nproc-per-node=8 cleanrl/ppo_atari_multigpu.py")


class FakeBatch:
    """An HTTP server answering AWS Batch's RegisterJobDefinition and SubmitJob, recording every request."""

    ARN = "arn:aws:batch:us-east-1:123456789012:job-definition/cleanrl:7"

    def __init__(self):
        self.received: list[tuple[str, dict]] = []
        operations = {BATCH.operation_model(op).http["requestUri"]: op for op in ("RegisterJobDefinition", "SubmitJob")}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                op = operations.get(self.path, self.path)
                fake.received.append((op, body))
                if op == "RegisterJobDefinition":
                    reply = {
                        "jobDefinitionName": body["jobDefinitionName"],
                        "jobDefinitionArn": fake.ARN,
                        "revision": 7,
                    }
                else:
                    reply = {
                        "jobName": body["jobName"],
                        "jobId": f"job-{len(fake.received)}",
                        "jobArn": "arn:aws:batch:job",
                    }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fake_batch():
    fake = FakeBatch()
    yield fake
    fake.server.shutdown()


def test_missing_credentials_or_region_sends_nothing(tmp_path, fake_batch):
    args = ["--command", USER_COMMAND, "--num-seeds", "2", "--num-nodes", "2", "--instance-type", "g5.12xlarge"]
    res = run_submit(args, tmp_path, aws_env(tmp_path, AWS_ENDPOINT_URL=fake_batch.url))
    line = one_error_line(res)
    assert "nothing was submitted" in line and "credentials" in line and "region" in line, line

    with_keys = dict(
        AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secretexample", AWS_ENDPOINT_URL=fake_batch.url
    )
    line = one_error_line(run_submit(args, tmp_path, aws_env(tmp_path, **with_keys)))
    assert "region" in line and "credentials" not in line, line
    assert fake_batch.received == []


def test_secret_reaches_the_job_environment_only(tmp_path, fake_batch):
    args = [
        "--command",
        USER_COMMAND,
        "--num-seeds",
        "2",
        "--num-nodes",
        "2",
        "--instance-type",
        "g5.12xlarge",
        "--wandb-key-env",
        "MY_WANDB_KEY",
        "--job-queue",
        "gpu-queue",
    ]
    env = aws_env(
        tmp_path,
        MY_WANDB_KEY=SECRET,
        AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
        AWS_SECRET_ACCESS_KEY="secretexample",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=fake_batch.url,
    )
    dry = run_submit([*args, "--dry-run"], tmp_path, env)
    assert dry.returncode == 0, dry.stderr
    assert SECRET not in dry.stdout + dry.stderr and '"value": "***"' in dry.stdout
    for r in json.loads(dry.stdout):
        assert_valid_batch_request(r["operation"], r["params"])

    res = run_submit(args, tmp_path, env)
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout + res.stderr
    assert [op for op, _ in fake_batch.received] == ["RegisterJobDefinition", "SubmitJob", "SubmitJob"]
    for op, body in fake_batch.received:
        assert_valid_batch_request(op, body)
    for seed, (_, body) in zip((1, 2), fake_batch.received[1:]):
        assert body["jobDefinition"] == FakeBatch.ARN and body["jobQueue"] == "gpu-queue"
        overrides = body["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]
        assert overrides["environment"] == [{"name": "WANDB_API_KEY", "value": SECRET}]
        assert SECRET not in json.dumps(overrides["command"])
        assert "--nproc-per-node=4" in overrides["command"][2]
        run_name = f"BeamRiderNoFrameskip-v4__ppo_atari_multigpu__{seed}"
        assert overrides["command"][2].endswith(f"--seed {seed} --run-name {run_name} --resume auto")
        assert f"job-{seed + 1}" in res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--command", "cleanrl/ppo_atari_multigpu.py"], "must be `python SCRIPT"),
        (["--command", "python cleanrl/ppo_atari.py", "--num-nodes", "2"], "torch.distributed script"),
        (["--command", "python cleanrl/ppo.py --seed 3"], "must not set --seed"),
        (["--command", "python cleanrl/ppo_atari.py --run-name x"], "must not set --run-name"),
        (
            ["--command", "python cleanrl/ppo_atari.py --runs-dir r", "--efs-file-system-id", "fs-1"],
            "must not set --runs-dir with --efs-file-system-id",
        ),
        (["--command", USER_COMMAND, "--efs-access-point-id", "fsap-1"], "needs --efs-file-system-id"),
        (["--command", USER_COMMAND, "--instance-type", "x9.huge"], "unknown --instance-type 'x9.huge'"),
        (["--command", USER_COMMAND, "--wandb-key-env", "NOT_SET_ANYWHERE_123"], "NOT_SET_ANYWHERE_123"),
        # the command's own flags, checked here by the script's Args before anything is submitted
        (["--command", "python cleanrl/ppo_atari.py --env-id Pong"], "unknown environment id 'Pong'"),
        (["--command", "python cleanrl/ppo_atari.py --num-envz 8"], "do not parse for ppo_atari.py"),
        (["--command", "python cleanrl/ppo_atari.py --gamma 1.5"], "--gamma must be between 0 and 1"),
        (
            ["--command", "python cleanrl/ppo.py --env-id BreakoutNoFrameskip-v4"],
            "ppo.py: 'BreakoutNoFrameskip-v4' is an Atari game",
        ),
        (["--command", "python cleanrl/ppo_atari.py --exp-name a/b"], "--exp-name 'a/b' is not a folder name"),
    ],
)
def test_bad_input_gives_one_line_error(tmp_path, args, message):
    assert message in one_error_line(submit_here([*args, "--dry-run"], tmp_path))


@pytest.mark.parametrize(
    "command, message",
    [
        ("python cleanrl/ppo_atari.py --exp-name=../x", "--exp-name '../x' is not a folder name: a run is one folder"),
        ("python cleanrl/ppo_atari.py --exp-name ' x'", "--exp-name ' x' is not a folder name"),
        ("python cleanrl/ppo_atari.py --run-name=a/b", "must not set --run-name"),
        # not checked by its Args here (a module, or a script only the cluster's image has), the names still are
        ("python -m cleanrl.ppo_atari --exp-name a/b", "--exp-name 'a/b' is not a folder name"),
        ("python /opt/image/ppo_atari.py --exp-name ..", "--exp-name '..' is not a folder name"),
    ],
)
@pytest.mark.parametrize("provider", ["aws", "local", "slurm"])
def test_names_are_one_folder_name_before_anything_is_submitted(tmp_path, command, message, provider):
    res = run_submit(["--command", command, "--provider", provider, "--dry-run"], tmp_path)
    assert message in one_error_line(res) and not res.stdout and list(tmp_path.iterdir()) == []


def test_an_exp_name_given_as_flag_equals_value_names_the_runs(tmp_path):
    res = submit_here(
        [
            "--command",
            "python cleanrl/ppo_atari.py --exp-name=wide --env-id=PongNoFrameskip-v4",
            "--provider",
            "slurm",
            "--dry-run",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "run_names=(PongNoFrameskip-v4__wide__1)" in res.stdout


@pytest.mark.parametrize(
    "flags, message",
    [
        ("--num-envs abc", "do not parse for ppo_atari.py: 'abc' is not a number; give a whole number"),
        ("--vector-env foo", "do not parse for ppo_atari.py: invalid choice 'foo' for argument '--vector-env'"),
        (
            "--num-envz 8",
            "do not parse for ppo_atari.py: Unrecognized options: --num-envz, 8 Perhaps you meant: --num-envs",
        ),
    ],
)
def test_a_flag_that_does_not_parse_is_said_in_the_scripts_words(tmp_path, flags, message):
    """The script's own line or tyro's text without its frame, and the script's --help, not this tool's."""
    for command in (f"python cleanrl/ppo_atari.py {flags}", f"python -m cleanrl.ppo_atari {flags}"):
        line = one_error_line(submit_here(["--command", command, "--dry-run"], tmp_path))
        assert message in line and line.endswith("; see `python cleanrl/ppo_atari.py --help`"), line
        assert "For full helptext" not in line and "submit_exp" not in line and "---" not in line, line


def test_a_script_not_found_here_is_submitted_with_a_note_that_its_flags_are_unchecked(tmp_path):
    res = submit_here(["--command", "python /opt/image/train.py --env-id Pong", "--dry-run"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert (
        "note: /opt/image/train.py is not a training script of this project found here: its flags are checked "
        "only when the job runs it"
    ) in res.stderr.splitlines()
    checked = submit_here(
        ["--command", "python cleanrl/ppo_atari.py --env-id PongNoFrameskip-v4", "--dry-run"], tmp_path
    )
    assert checked.returncode == 0 and "not a training script" not in checked.stderr, checked.stderr


# a tiny but real multi-node training run: each of the 2 ranks steps 1 env for 32 steps, so the global batch is 64
# and --total-timesteps 64 makes exactly one update, logged at global step 64 (a single rank would log 32 and 64)
TINY_MULTIGPU = (
    f"python {REPO_ROOT / 'cleanrl' / 'ppo_atari_multigpu.py'} --env-id BreakoutNoFrameskip-v4 --local-num-envs 1 "
    "--num-steps 32 --num-minibatches 2 --update-epochs 1 --total-timesteps 64 --vector-env sync --no-progress-bar"
)


def why_it_failed(output: str) -> str:
    """A failed multi-node run's first lines, then the lines that say why (an abort's message, Python's fault
    handler, errors, exit codes) last, where a cut log still shows them."""
    lines = output.splitlines()
    why = [
        line
        for line in lines
        if re.search(
            r"terminate called|what\(\)|Fatal Python|Thread 0x|File \"/(?!.*"
            r"site-packages/torch/distributed)|error|exit code",
            line,
        )
    ]
    return "\n".join([*lines[:30], "...", *why[-60:]])


def with_fault_handler() -> dict[str, str]:
    """Our environment, with Python's fault handler on: a rank that aborts prints where each of its threads was."""
    return {**os.environ, "PYTHONFAULTHANDLER": "1"}


def assert_two_rank_runs(runs_dir: Path, seeds: tuple[int, ...], output: str) -> None:
    runs = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
    assert [r.name.split("__")[2] for r in runs] == [str(s) for s in seeds], (runs, output[-4000:])
    for run in runs:  # one logging rank per run, one update of the 2-rank batch
        assert [step for step, _ in read_scalars(run, "losses/value_loss")] == [64], output[-4000:]


@pytest.mark.torchrun
@pytest.mark.slow
def test_local_provider_runs_two_simulated_nodes_and_retries_a_killed_one(tmp_path):
    """Two simulated nodes of a multi-node job, each a torchrun launcher with its output prefixed, train one run
    together (one logging rank, the 2-rank batch per update). SIGKILL of one node's launcher mid-run: the run fails,
    is retried (a signal is not the script's own error), resumes from its last checkpoint in the same run folder and
    ends at the step an uninterrupted run ends at, both nodes exiting 0."""
    runs, log, iterations = tmp_path / "runs", tmp_path / "submit.log", 12
    command = TINY_MULTIGPU.replace("--total-timesteps 64", f"--total-timesteps {iterations * 64}")
    proc = start_script(
        [
            str(REPO_ROOT / SUBMIT),
            "--provider",
            "local",
            "--num-nodes",
            "2",
            "--instance-type",
            "c5.12xlarge",
            "--num-retries",
            "1",
            "--command",
            f"{command} --runs-dir {runs} --checkpoint-interval 1",
        ],
        tmp_path,
        log,
        env=with_fault_handler(),
    )
    try:
        wait_for(log, "checkpoint: iteration 2,", proc, timeout=300)
        node1 = [p for p in psutil.Process(proc.pid).children() if p.environ().get("AWS_BATCH_JOB_NODE_INDEX") == "1"]
        assert len(node1) == 1
        node1[0].send_signal(signal.SIGKILL)
        code = proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert code == 0, why_it_failed(output)
    assert re.search(r"seed 1: node exit codes \[-?\d+, -9\]", output) and "seed 1: retry 1 of 1" in output, output
    resumed = re.search(r"resuming from iteration (\d+) \(global step (\d+)\)", output)
    assert resumed and 2 <= int(resumed[1]) < iterations, output[-4000:]
    assert output.rstrip().splitlines()[-1] == "seed 1: node exit codes [0, 0]"
    assert "[seed 1 node 0]" in output and "[seed 1 node 1]" in output
    run_dir = runs / "BreakoutNoFrameskip-v4__ppo_atari_multigpu__1"
    assert [p.name for p in runs.iterdir()] == [run_dir.name]
    assert [step for step, _ in read_scalars(run_dir, "losses/value_loss")] == [
        64 * i for i in range(1, iterations + 1)
    ]


@pytest.mark.torchrun
@pytest.mark.slow
def test_local_provider_fails_and_stops_the_other_node(tmp_path):
    # rank 1 dies before joining; rank 0 would wait in init_process_group for many minutes if not stopped
    start = time.monotonic()
    res = run_submit(
        [
            "--provider",
            "local",
            "--num-nodes",
            "2",
            "--launcher",
            "torchrun",
            "--num-retries",
            "0",
            "--command",
            f"python {STANDIN} --out-dir {tmp_path / 'out'} --fail-rank 1",
        ],
        tmp_path,
        timeout=240,
    )
    assert "seed 1" in one_error_line(res)
    assert time.monotonic() - start < 150
    # rank 0 never got past init_process_group, so it wrote nothing
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_two_node_torchrun_job(slurm_cluster, tmp_path):
    runs, script = tmp_path / "runs", tmp_path / "job.sbatch"
    res = run_submit(
        [
            "--provider",
            "slurm",
            "--num-nodes",
            "2",
            "--start-seed",
            "5",
            "--vcpus",
            "1",
            "--memory",
            "500",
            "--gpus",
            "0",
            "--slurm-script-path",
            str(script),
            "--submit",
            "--wait",
            "--command",
            f"{TINY_MULTIGPU} --runs-dir {runs}",
        ],
        tmp_path,
        slurm_cluster.env,
        timeout=400,
    )
    logs = "\n".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
    assert res.returncode == 0, res.stdout + res.stderr + logs + slurm_cluster.logs()
    text = script.read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --array=0-0",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --mem=500M",
        "export SEED=$((5 + SLURM_ARRAY_TASK_ID % 1))",
    ):
        assert line in text.splitlines(), line
    assert "#SBATCH --gpus-per-node" not in text
    assert f'{sys.executable} -m torch.distributed.run --nnodes="$SLURM_NNODES" --node-rank="$SLURM_NODEID"' in text
    assert_two_rank_runs(runs, (5,), logs)


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_failed_job_exit_code_comes_back(slurm_cluster, tmp_path):
    # `sbatch --wait` returns the jobs' exit code: python's 2 for a missing script; one array task per seed
    res = run_submit(
        [
            "--provider",
            "slurm",
            "--num-seeds",
            "2",
            "--start-seed",
            "5",
            "--vcpus",
            "1",
            "--memory",
            "100",
            "--gpus",
            "0",
            "--submit",
            "--wait",
            "--slurm-script-path",
            str(tmp_path / "fail.sbatch"),
            "--command",
            f"python {tmp_path / 'missing.py'}",
        ],
        tmp_path,
        slurm_cluster.env,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "exited with 2" in res.stderr.strip().splitlines()[-1]
    logs = sorted(p.read_text() for p in (tmp_path / "logs").glob("*.log"))
    assert len(logs) == 2 and all("missing.py" in log for log in logs), logs
    assert [log.splitlines()[0].split(":")[0] for log in logs] == ["seed 5", "seed 6"], logs


def test_a_dry_run_warns_of_idle_cores_and_lost_run_folders(tmp_path):
    res = run_submit(
        [
            "--command",
            "python cleanrl/ppo_atari_multigpu.py --env-id BreakoutNoFrameskip-v4",
            "--num-nodes",
            "4",
            "--instance-type",
            "c5.12xlarge",
            "--dry-run",
        ],
        tmp_path,
        aws_env(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)  # the requests alone on stdout
    assert "each node steps 8 envs on 48 vCPUs: most of its cores will idle" in res.stderr
    assert "without --efs-file-system-id the run folders" in res.stderr
    assert "must exist in the account" in res.stderr
    fitting = run_submit(
        [
            "--command",
            "python cleanrl/ppo_atari_multigpu.py --local-num-envs 12",
            "--num-nodes",
            "2",
            "--instance-type",
            "g5.12xlarge",
            "--efs-file-system-id",
            "fs-1",
            "--dry-run",
        ],
        tmp_path,
        aws_env(tmp_path),
    )
    assert fitting.returncode == 0 and "idle" not in fitting.stderr and "EFS" not in fitting.stderr, fitting.stderr


def test_cleanrls_own_command_line_is_taken_with_its_renamed_flags(tmp_path):
    """CleanRL's documented AWS line: each of its flags that this tool renamed means the same here (hours as
    seconds, attempts as retries after the first)."""
    cleanrl = ["--docker-tag", "vwxyzjn/cleanrl:latest", "--job-queue", "c5a-large-spot", "--num-seed", "2"]
    cleanrl += ["--num-vcpu", "1", "--num-memory", "2000", "--num-hours", "48.0", "--aws-num-retries", "2"]
    res = run_submit(
        ["--command", "python cleanrl/ppo.py --env-id CartPole-v1", *cleanrl, "--provider", "aws", "--dry-run"],
        tmp_path,
        aws_env(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    requests = json.loads(res.stdout)
    assert [r["operation"] for r in requests] == ["RegisterJobDefinition"] + ["SubmitJob"] * 2
    definition = requests[0]["params"]
    container = definition["containerProperties"]
    assert container["image"] == "vwxyzjn/cleanrl:latest"
    assert {r["type"]: r["value"] for r in container["resourceRequirements"]} == {"VCPU": "1", "MEMORY": "2000"}
    assert definition["timeout"] == {"attemptDurationSeconds": 48 * 3600}
    assert definition["retryStrategy"]["attempts"] == 2
    assert requests[1]["params"]["jobQueue"] == "c5a-large-spot"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-b"], "-b is not a flag of this tool: build and push the repository's Dockerfile yourself"),
        (["--exp-script", "ppo.sh"], "--exp-script is not a flag of this tool: CleanRL's --exp-script names a file"),
    ],
)
def test_cleanrls_flags_without_an_equal_here_name_what_to_do(tmp_path, args, message):
    res = run_submit(["--command", USER_COMMAND, *args, "--dry-run"], tmp_path, aws_env(tmp_path))
    assert message in one_error_line(res) and not res.stdout


@pytest.mark.parametrize("key", [["--wandb-key", SECRET], [f"--wandb-key={SECRET}"], ["--wandb_key", SECRET]])
def test_cleanrls_wandb_key_is_refused_without_printing_it(tmp_path, key):
    """CleanRL's test line: its key used to come back in clear text in tyro's box."""
    res = run_submit(["--docker-tag", "vwxyzjn/cleanrl:latest", *key, "--command", USER_COMMAND], tmp_path)
    assert "pass its name: --wandb-key-env NAME" in one_error_line(res)
    assert SECRET not in res.stdout + res.stderr
