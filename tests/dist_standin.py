"""A tiny torch.distributed job standing in for a multi-node training script in the submission tests.

Started by torchrun on each node: joins the gloo process group, all-reduces its rank and writes what it saw
(rank, world size, the reduced sum, the seed and the node index it was given) to OUT_DIR/seed{seed}_rank{rank}.json.
With --fail-rank R, rank R exits with status 3 instead of joining, leaving the others waiting in the rendezvous.
"""

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out-dir", required=True)
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--fail-rank", type=int, default=-1, help="this rank exits with 3 before joining the group")
args = parser.parse_args()
if int(os.environ["RANK"]) == args.fail_rank:
    raise SystemExit(3)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
result = {
    "rank": rank,
    "world_size": world,
    "sum": total.item(),
    "seed": args.seed,
    "node": os.environ.get("AWS_BATCH_JOB_NODE_INDEX", os.environ.get("SLURM_NODEID")),
    "group_rank": int(os.environ["GROUP_RANK"]),
}
Path(args.out_dir).mkdir(parents=True, exist_ok=True)
Path(args.out_dir, f"seed{args.seed}_rank{rank}.json").write_text(json.dumps(result))
dist.destroy_process_group()
