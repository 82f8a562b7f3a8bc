"""Training on a native backend is training on the Python chain, once the random no-op draw at reset is taken out.

The backends draw the 1-30 no-op frames at reset from different random streams (gymnasium's, ale-py's, EnvPool's),
so two runs of `ppo_atari.py` on different backends play different games. Everything else is meant to be the same:
frames, clipped rewards, lost-life and game-over flags, the serve after a lost life, SAME_STEP resets and the
frame-stack restart. With the draw fixed (EnvPool and the chain: exactly 1 no-op frame; ale-py and the chain:
none), the same seed must therefore log the same losses and the same game returns, bit for bit, on one torch
thread. The runs are long enough (4 envs x 384 steps, random-ish early policy) for lost lives and game overs to
happen, so the serve and reset paths are inside what is compared. A backend that mis-orders envs, drops a reward,
flags a lost life differently or serves differently changes the losses.
"""

from __future__ import annotations

import pytest
from helpers import FAST, LOSS_TAGS, REPO_ROOT, find_run_dir, read_scalars, run_each

from cleanrl_utils.vector_envs import envpool_available

RUN = ["--num-envs", "4", "--num-steps", "128", "--total-timesteps", "1536", "--seed", "5"]
RUN += ["--torch-threads", "1", "--env-threads", "1", "--no-progress-bar"]

# ppo_atari.py as a user runs it, with every backend's no-op draw fixed to NOOP_MAX frames: `python launch.py
# NOOP_MAX ARGS...` in the repository root
LAUNCH = """
import functools, runpy, sys
import cleanrl_utils.vector_envs as v
v.make_atari_vector_env = functools.partial(v.make_atari_vector_env, noop_max=int(sys.argv[1]))
sys.argv = ["cleanrl/ppo_atari.py", *sys.argv[2:]]
runpy.run_path("cleanrl/ppo_atari.py", run_name="__main__")
"""
TAGS = [*LOSS_TAGS, "charts/episodic_return"]


CASES = [("ale", 0), ("envpool", 1)]  # (native backend, no-op frames at reset), each compared with the chain


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], dict[str, list[tuple[int, float]]]]:
    """{(backend, no-op frames): {tag: its scalars}}: each case's native run and its chain run, made once, together,
    in processes forked from one that imported torch first (run_each); each run is seeded by the script."""
    workdir = tmp_path_factory.mktemp("backends")
    (workdir / "launch.py").write_text(LAUNCH)
    wanted = [(b, noop) for native, noop in CASES for b in ("sync", native)]
    wanted = [(b, noop) for b, noop in wanted if b != "envpool" or envpool_available()]  # (else: the test fails)
    jobs = [
        [str(workdir / "launch.py"), str(noop), *RUN, "--vector-env", b, "--runs-dir", str(workdir / f"{b}{noop}")]
        for b, noop in wanted
    ]
    results = run_each([(job, REPO_ROOT) for job in jobs], env=FAST, timeout=1200, train=True)
    logged = {}
    for (backend, noop), result in zip(wanted, results):
        assert result.returncode == 0, result.stderr[-3000:]
        run_dir = find_run_dir(workdir / f"{backend}{noop}")
        logged[backend, noop] = {tag: read_scalars(run_dir, tag) for tag in TAGS}
    return logged


@pytest.mark.slow
@pytest.mark.parametrize("backend, noop_max", CASES)
def test_a_native_backend_trains_exactly_like_the_chain_with_the_no_op_draw_fixed(runs, backend, noop_max):
    if backend == "envpool" and not envpool_available():
        pytest.fail("envpool is part of the test extra: pip install -e '.[test]'")
    chain, native = runs["sync", noop_max], runs[backend, noop_max]
    assert len(chain["losses/value_loss"]) == 3
    assert len(chain["charts/episodic_return"]) >= 2, "no game ended: the reset path was not compared"
    assert native == chain
