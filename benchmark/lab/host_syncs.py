"""Count the host syncs of a training script: the points where Python waits for the GPU (or would, on a GPU).

    python -m benchmark.lab.host_syncs cleanrl/ppo_atari.py --num-envs 4 --num-steps 16 --total-timesteps 128

runs the script in this process with its own arguments and prints

    host syncs: rollout step X, minibatch Y, iteration rest Z (counter)

and, on CUDA, a second such line ending in `(cuda sync debug)`, from torch's own sync warnings. The counter (a
`TorchFunctionMode`, so it works on CPU too) counts the torch calls that make the host wait on CUDA: reading a value
back (`.item`, `.cpu`, `.numpy`, `.tolist`, `if` on a tensor, `np.asarray`, formatting; a read right after a counted
`.cpu()` is the same transfer), a blocking upload (a tensor made from host data with a `device`, indexing with or
assigning a numpy array or list, and in the script's own lines `.to(device)`/`.cuda()` without `non_blocking=True`),
and outputs whose size depends on the data (`nonzero`, `masked_select`, `unique`, boolean masks). Not counted:
non-blocking copies, host tensors as indices, collectives, syncs inside compiled or C++ code.

A call counts for the innermost of the script's loops a frame of the script is in: the rollout (`for step in ...`),
a minibatch (the loop that binds `mb_inds`) or the iteration (`for iteration in ...`); what happens outside every
iteration is reported apart. The counts are per rollout step, per optimizer step and per iteration.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import os
import signal
import sys
import types
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.overrides import TorchFunctionMode

from cleanrl_utils.validation import fail

Tensor = torch.Tensor
READS = {
    Tensor.item, Tensor.cpu, Tensor.numpy, Tensor.tolist, Tensor.__bool__, Tensor.__float__, Tensor.__int__,
    Tensor.__index__, Tensor.__array__, Tensor.__format__, Tensor.__repr__, Tensor.__contains__,
}  # fmt: skip
CREATIONS = {torch.tensor, torch.as_tensor}
DATA_DEPENDENT = {Tensor.nonzero, torch.nonzero, Tensor.masked_select, torch.masked_select, Tensor.unique, torch.unique}
PHASES = ("rollout", "minibatch", "iteration", "checkpoint", "outside")  # a checkpoint's: once per checkpoint


def loop_lines(path: str) -> dict[str, tuple[int, int]]:
    """The first and last line of the script's rollout loop, minibatch loop, iteration loop and checkpoint block (a script without a
    rollout or minibatch loop of its own has its syncs there counted for the iteration)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        saves = isinstance(node, ast.If) and any(
            isinstance(c, ast.Call) and getattr(c.func, "id", "") == "save_checkpoint" for c in ast.walk(node)
        )
        if saves:  # the checkpoint's block: its reads (the games to save) come once per checkpoint, not per iteration
            found.setdefault("checkpoint", (node.lineno, node.end_lineno or node.lineno))
        if not isinstance(node, ast.For):
            continue
        names = {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        lines = (node.lineno, node.end_lineno or node.lineno)
        assigned = {n.id for st in node.body if isinstance(st, ast.Assign) for t in st.targets for n in ast.walk(t)
                    if isinstance(n, ast.Name)}  # fmt: skip
        if "step" in names:
            found["rollout"] = lines
        elif "iteration" in names:
            found["iteration"] = lines
        elif "mb_inds" in names | assigned:  # `for mb_inds in ...` or CleanRL's `mb_inds = b_inds[start:end]`
            found.setdefault("minibatch", lines)
    if "iteration" not in found:
        fail(f"{path}: found no iteration loop (`for iteration in ...`): nothing to count syncs per iteration in")
    return found


@dataclass
class SyncCount:
    """Counted host syncs of one script run: per phase, and per (phase, line, call)."""

    path: str
    loops: dict[str, tuple[int, int]]
    phases: Counter = field(default_factory=Counter)
    sites: Counter = field(default_factory=Counter)

    def record(self, what: str) -> None:
        phase, line = self.where()
        self.phases[phase] += 1
        self.sites[(phase, line, what)] += 1

    def where(self) -> tuple[str, int]:
        """The phase of the innermost frame of the script that runs inside one of its loops."""
        frame, first_line = sys._getframe(2), 0
        while frame is not None:
            if frame.f_code.co_filename == self.path:
                line = frame.f_lineno
                first_line = first_line or line
                for phase in ("rollout", "minibatch", "checkpoint", "iteration"):
                    start, end = self.loops.get(phase, (0, -1))
                    if start <= line <= end:
                        return phase, line
            frame = frame.f_back
        return "outside", first_line


def _holds(index: Any, kinds: tuple) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, kinds) for i in items)


def _bool_mask(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Tensor) and i.dtype == torch.bool for i in items)


class HostSyncCounter(TorchFunctionMode):
    """Counts (into `count`) the torch calls that make the host wait for the device on CUDA; see the module doc."""

    def __init__(self, count: SyncCount):
        super().__init__()
        self.count = count
        self.last_transfer: Optional[Tensor] = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = self.classify(func, args, kwargs)
        self.last_transfer = None  # only the very next call may read the result of a transfer for free
        result = func(*args, **kwargs)
        if what:
            self.count.record(what)
            if func is Tensor.cpu or func is Tensor.to:
                self.last_transfer = result
        return result

    def classify(self, func, args, kwargs) -> Optional[str]:
        name = getattr(func, "__name__", str(func))
        if func in READS:
            if args and args[0] is self.last_transfer and func is not Tensor.cpu:
                return None  # `t.cpu().numpy()`: the host copy of the transfer just counted
            return f"Tensor.{name}"
        if func in CREATIONS:
            data = args[0] if args else kwargs.get("data")
            uploads = kwargs.get("device") is not None and not isinstance(data, Tensor)
            return f"torch.{name}(host data, device=...)" if uploads else None
        if func is Tensor.to or func is Tensor.cuda:
            if sys._getframe(2).f_code.co_filename != self.count.path:
                return None  # torch's own moves (e.g. in clip_grad_norm_) stay on the device of their tensors
            devices = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, (torch.device, str, int))]
            blocking = not kwargs.get("non_blocking") and not any(a is True for a in args[1:])
            named = func is Tensor.cuda or any(not isinstance(a, bool) for a in devices)
            return f"Tensor.{name}(device) blocking" if named and blocking else None
        if func in DATA_DEPENDENT:
            return f"{name} (data-dependent size)"
        if func is Tensor.__getitem__ or func is Tensor.__setitem__:
            index = args[1]
            if _holds(index, (np.ndarray, list)):
                return f"Tensor.{name} with a host index"
            if _bool_mask(index):
                return f"Tensor.{name} with a boolean mask"
            if func is Tensor.__setitem__ and isinstance(args[2], np.ndarray):
                return "Tensor.__setitem__ of a numpy array"
        return None


@dataclass
class ScriptRun:
    """What one run of a script under the counters found."""

    counter: SyncCount
    cuda: Optional[SyncCount]
    exit_code: Any
    rollout_steps: int
    minibatches: int
    iterations: int

    def per_phase(self, count: SyncCount) -> tuple[float, float, float]:
        """Syncs per rollout step, per minibatch, per iteration outside them."""
        return (
            count.phases["rollout"] / max(self.rollout_steps, 1),
            count.phases["minibatch"] / max(self.minibatches, 1),
            count.phases["iteration"] / max(self.iterations, 1),
        )


def exec_script(
    path: str,
    argv: list[str],
    mode: Optional[TorchFunctionMode] = None,
    at_exit: Optional[Callable[[dict], Any]] = None,
) -> tuple[dict, Any]:
    """Run the script as `python path argv...` would, but in this process (under `mode`); returns its globals after
    the run and its exit code. The signal handlers it installs are put back afterwards. `at_exit(globals)` is an exit
    handler while the script runs: it is called if the script ends the process itself (a rank of the multi-GPU
    script runs the exit handlers, then `os._exit`), and left to the caller if the script returns."""
    path = os.path.abspath(path)
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    module = types.ModuleType("__main__")  # tyro resolves the Args annotations in the dataclass's module
    module.__file__ = path
    old = sys.argv, sys.modules["__main__"], signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    sys.argv, sys.modules["__main__"] = [path, *argv], module
    exit_code: Any = 0
    if at_exit is not None:
        atexit.register(at_exit, module.__dict__)
    try:
        with mode if mode is not None else contextlib.nullcontext():
            exec(code, module.__dict__)
    except SystemExit as exc:
        exit_code = exc.code
    finally:
        if at_exit is not None:
            atexit.unregister(at_exit)
        sys.argv, sys.modules["__main__"] = old[:2]
        signal.signal(signal.SIGINT, old[2])
        signal.signal(signal.SIGTERM, old[3])
    return module.__dict__, exit_code


def run_script(path: str, argv: list[str]) -> ScriptRun:
    """Run the script with `argv` under the counter (and, on CUDA, torch's sync debug mode); the rollout steps,
    minibatches (optimizer steps) and iterations are taken from the finished run."""
    path = os.path.abspath(path)
    loops = loop_lines(path)
    counter, cuda = SyncCount(path, loops), SyncCount(path, loops)
    minibatches = [0]
    hook = register_optimizer_step_post_hook(lambda *_: minibatches.__setitem__(0, minibatches[0] + 1))
    old_showwarning = warnings.showwarning
    cuda_used = torch.cuda.is_available()

    def show(message, category, *rest, **kwargs):
        if "synchroniz" in str(message):
            cuda.record("cuda sync debug warning")
        else:
            old_showwarning(message, category, *rest, **kwargs)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            if cuda_used:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                namespace, exit_code = exec_script(path, argv, HostSyncCounter(counter))
            finally:
                if cuda_used:
                    torch.cuda.set_sync_debug_mode(0)
    finally:
        hook.remove()
    args = namespace.get("args")
    iterations = namespace["iteration"] - namespace.get("start_iteration", 0) if "iteration" in namespace else 0
    device = namespace.get("device")
    on_cuda = isinstance(device, torch.device) and device.type == "cuda"
    return ScriptRun(
        counter=counter,
        cuda=cuda if on_cuda else None,
        exit_code=exit_code,
        rollout_steps=iterations * getattr(args, "num_steps", 0),
        minibatches=minibatches[0],
        iterations=iterations,
    )


def summary_line(per_step: float, per_minibatch: float, per_iteration: float, how: str) -> str:
    per = f"rollout step {per_step:g}, minibatch {per_minibatch:g}, iteration rest {per_iteration:g}"
    return f"host syncs: {per} ({how})"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    script, script_args = argv[0], argv[1:]
    if not os.path.isfile(script):
        fail(f"no such script: {script} (give the training script first, then its arguments)")
    run = run_script(script, script_args)
    if run.exit_code not in (0, None):
        fail(f"{script} ended with exit code {run.exit_code}: no counts")
    if run.iterations == 0:
        fail(f"{script} ran no iteration: no counts")
    rel = os.path.relpath(script)
    in_iterations = sum(run.counter.phases[phase] for phase in PHASES[:3])
    print(
        f"host syncs counted in {run.rollout_steps} rollout steps, {run.minibatches} minibatches, {run.iterations} "
        f"iterations: {in_iterations / run.iterations:g} per iteration in all; where (phase, line, call: count):"
    )
    sites = sorted(run.counter.sites.items(), key=lambda item: (PHASES.index(item[0][0]), item[0][1]))
    for (phase, line, what), n in sites:
        print(f"  {phase:9s} {rel}:{line} {what}: {n}")
    print(summary_line(*run.per_phase(run.counter), "counter"), flush=True)
    if run.cuda is not None:
        print(summary_line(*run.per_phase(run.cuda), "cuda sync debug"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
