"""The AWS Batch provider of `submit_exp.py`: a job definition and a job per seed, sent with boto3 or printed."""

from __future__ import annotations

import json
import sys
from typing import Optional

from cleanrl_utils.launch.job import NO_RETRY_EXIT_CODES, WANDB_ENV, Args, Job, check_retries, job_node_command
from cleanrl_utils.launch.job import masked, seeds, wandb_key
from cleanrl_utils.launch.nodes import aws_node_vars
from cleanrl_utils.launch.runs import flag_value
from cleanrl_utils.validation import fail, first_sentence

EFS_VOLUME = "runs"


def efs_volume(args: Args) -> dict:
    """The run folders' EFS volume, encrypted in transit (as an access point needs), through the access point if any."""
    config: dict = {"fileSystemId": args.efs_file_system_id, "transitEncryption": "ENABLED"}
    if args.efs_access_point_id:
        config["authorizationConfig"] = {"accessPointId": args.efs_access_point_id, "iam": "ENABLED"}
    else:
        config["rootDirectory"] = args.efs_root_directory
    return config


def retry_strategy(num_retries: int) -> dict:
    """Retry a lost host (`Host EC2 ...`) whatever the exit code, and a kill or crash; not the script's own errors."""
    if num_retries == 0:
        return {"attempts": 1}
    rules = [{"onStatusReason": "Host EC2*", "action": "RETRY"}]
    rules += [{"onExitCode": str(code), "action": "EXIT"} for code in NO_RETRY_EXIT_CODES]
    rules.append({"onReason": "*", "action": "RETRY"})
    return {"attempts": 1 + num_retries, "evaluateOnExit": rules}


def aws_requests(args: Args, job: Job, key: Optional[str]) -> list[tuple[str, dict]]:
    """The RegisterJobDefinition request and a SubmitJob request per seed, as (botocore operation, params)."""
    resources = [{"type": "VCPU", "value": str(job.node.vcpus)}, {"type": "MEMORY", "value": str(job.node.memory_mib)}]
    if job.node.gpus:
        resources.append({"type": "GPU", "value": str(job.node.gpus)})
    container: dict = {"image": args.docker_image, "resourceRequirements": resources}
    if args.wandb_secret_arn:
        container["secrets"] = [{"name": WANDB_ENV, "valueFrom": args.wandb_secret_arn}]
        container["executionRoleArn"] = args.execution_role_arn
    if args.efs_file_system_id:
        container["volumes"] = [{"name": EFS_VOLUME, "efsVolumeConfiguration": efs_volume(args)}]
        container["mountPoints"] = [{"sourceVolume": EFS_VOLUME, "containerPath": args.efs_runs_dir, "readOnly": False}]
    definition: dict = {
        "jobDefinitionName": args.job_definition,
        "retryStrategy": retry_strategy(args.num_retries),
        "timeout": {"attemptDurationSeconds": args.timeout_seconds},
        "platformCapabilities": ["EC2"],
    }
    if job.num_nodes > 1:
        container["instanceType"] = args.instance_type
        definition["type"] = "multinode"
        definition["nodeProperties"] = {
            "numNodes": job.num_nodes,
            "mainNode": 0,
            "nodeRangeProperties": [{"targetNodes": "0:", "container": container}],
        }
    else:
        definition["type"] = "container"
        definition["containerProperties"] = container
    requests = [("RegisterJobDefinition", definition)]
    for seed in seeds(args):
        overrides: dict = {
            "command": ["bash", "-c", job_node_command(job, seed, "python", "torchrun", aws_node_vars(args.rdzv_port))]
        }
        if key is not None:
            overrides["environment"] = [{"name": WANDB_ENV, "value": key}]
        submit: dict = {
            "jobName": f"{job.name}-seed{seed}",
            "jobQueue": args.job_queue,
            "jobDefinition": args.job_definition,
        }
        if job.num_nodes > 1:
            submit["nodeOverrides"] = {
                "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]
            }
        else:
            submit["containerOverrides"] = overrides
        requests.append(("SubmitJob", submit))
    return requests


def envs_per_node(job: Job) -> int:
    """The game envs one node steps: its ranks' `--local-num-envs`, or its share of `--num-envs`, or 8 per rank."""
    local, total = (flag_value(job.argv, flag) for flag in ("--local-num-envs", "--num-envs"))
    local, total = (None if v is None else int(float(v)) for v in (local, total))
    ranks = job.node.nproc if job.torchrun else 1
    if local is None and total is not None:
        return total // max(1, job.num_nodes) if job.torchrun else total
    return (local or 8) * ranks


def aws_notes(args: Args, job: Job) -> list[str]:
    """What the user may not have meant: idle cores, run folders that will be lost, what must exist already."""
    notes = [
        f"the job queue {args.job_queue!r} and the image {args.docker_image!r} must exist in the account "
        "(this tool registers a job definition and submits jobs, nothing more)"
    ]
    envs = envs_per_node(job)
    if envs * 4 <= job.node.vcpus:
        notes.append(
            f"each node steps {envs} envs on {job.node.vcpus} vCPUs: most of its cores will idle; give "
            f"--local-num-envs about {max(1, job.node.vcpus // job.node.nproc)} (per rank) or a smaller "
            "--instance-type"
        )
    if not args.efs_file_system_id:
        notes.append(
            "without --efs-file-system-id the run folders (logs, checkpoints) are lost when a job's "
            "container ends, and a retry starts its run over (docs/cluster.md)"
        )
    return notes


def submit_aws(args: Args, job: Job) -> None:
    if args.wandb_secret_arn and not args.execution_role_arn:
        fail("--wandb-secret-arn needs --execution-role-arn (the role AWS Batch uses to read the secret)")
    check_retries(args)
    if args.timeout_seconds < 60:
        fail(f"--timeout-seconds must be at least 60 on AWS Batch, got {args.timeout_seconds}")
    if args.efs_access_point_id and not args.efs_file_system_id:
        fail("--efs-access-point-id needs --efs-file-system-id (the file system the access point belongs to)")
    key = wandb_key(args)
    requests = aws_requests(args, job, key)
    if args.dry_run:
        for note in aws_notes(args, job):  # on stderr: a dry run's stdout is the requests' JSON
            print(f"note: {note}", file=sys.stderr, flush=True)
        print(json.dumps([{"operation": op, "params": masked(p, key)} for op, p in requests], indent=2))
        return
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        fail("--provider aws needs boto3: pip install boto3 (or the project's `cloud` extra)")
    try:
        session = boto3.session.Session(region_name=args.region)
        missing = []
        if session.get_credentials() is None:
            missing.append(
                "AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run `aws configure`)"
            )
        if not session.region_name:
            missing.append("an AWS region (pass --region or set AWS_DEFAULT_REGION)")
        if missing:
            fail(f"nothing was submitted: missing {' and '.join(missing)}")
        client = session.client("batch")
        (_, definition), submits = requests[0], requests[1:]
        registered = client.register_job_definition(**definition)
        print(f"registered job definition {registered['jobDefinitionArn']}")
        for _, submit in submits:
            submit["jobDefinition"] = registered["jobDefinitionArn"]
            response = client.submit_job(**submit)
            print(f"submitted {response['jobName']}: job id {response['jobId']}")
        for note in aws_notes(args, job)[1:]:  # the queue and image existed
            print(f"note: {note}", flush=True)
    except (BotoCoreError, ClientError) as exc:
        fail(f"AWS Batch: {first_sentence(exc)}")
