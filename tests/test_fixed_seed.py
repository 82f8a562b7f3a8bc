"""The logged losses of a fixed-seed CPU run stay bit-identical across refactors of the Atari scripts.

`tests/fixtures/fixed_seed_losses.json` holds what each script logged (sync backend, 4 envs x 32 steps, 4 iterations,
one torch thread: deterministic on CPU) before the scripts were restructured. A change that alters the update, the
rollout, the seeding or the order of random draws changes these numbers. Re-record them only for a change that is
meant to change the learning (and say so in the commit): `python tests/test_fixed_seed.py --record`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import LOSS_TAGS, find_run_dir, read_scalars, run_script

FIXTURE = Path(__file__).parent / "fixtures" / "fixed_seed_losses.json"
RUN = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "512", "--vector-env", "sync"]
RUN += ["--torch-threads", "1", "--no-progress-bar"]
SEED = 3
TAGS = [*LOSS_TAGS, "charts/learning_rate"]
SCRIPTS = {"ppo_atari": "cleanrl/ppo_atari.py", "ppo_atari_multigpu": "cleanrl/ppo_atari_multigpu.py"}


def logged_losses(script: str, workdir: Path, seed: int = SEED) -> dict[str, list[list[float]]]:
    """Run `script` once as a plain single process and return {tag: [[step, value], ...]}."""
    runs = workdir / "runs"
    result = run_script(
        [script, *RUN, "--seed", str(seed), "--runs-dir", str(runs)], cwd=workdir, timeout=400,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = find_run_dir(runs)
    return {tag: [[step, value] for step, value in read_scalars(run_dir, tag)] for tag in TAGS}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_fixed_seed_losses_are_identical_to_the_recorded_ones(tmp_path, name):
    expected = json.loads(FIXTURE.read_text())[name]
    assert logged_losses(SCRIPTS[name], tmp_path) == expected


def record() -> None:
    recorded = {}
    for name, script in SCRIPTS.items():
        with tempfile.TemporaryDirectory() as workdir:
            recorded[name] = logged_losses(script, Path(workdir))
    FIXTURE.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    record()
