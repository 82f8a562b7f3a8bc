"""A run whose losses or parameters turn non-finite (NaN, inf) stops at that iteration, before it saves anything:
its last checkpoint stays the last good state, and every later resume does not crash on a poisoned one."""

import math
import os

import torch

from cleanrl_utils.checkpoint import CHECKPOINT_FILE
from cleanrl_utils.validation import fail


def stop_if_diverged(numbers: dict, iteration: int, run_dir: str) -> None:
    """`numbers`: the update's losses and gradient norm (a non-finite parameter or gradient shows in them)."""
    bad = [name for name, value in numbers.items() if not math.isfinite(value)]
    if not bad:
        return
    if os.environ.get("RANK", "0") != "0":  # every rank of a job stops here; rank 0 says why
        raise SystemExit(1)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    kept = "the run has no checkpoint yet"
    if os.path.exists(path):
        kept = f"its last checkpoint (global step {torch.load(path, weights_only=True)['global_step']}) is kept"
    fail(
        f"the run diverged at iteration {iteration}: {', '.join(bad)} became non-finite, so it stopped and saved "
        f"nothing from it; {kept}; start a new run with a smaller --learning-rate or --max-grad-norm"
    )
