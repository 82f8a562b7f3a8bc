"""The fixed-seed runs against their recorded losses (tests/fixed_seed.py says how they are compared), and the
tolerance against real changes of the computation. As a program: `python tests/test_fixed_seed.py --record [FILE]`
(re-record the fixture, or record before a refactor) and `--compare FILE` (after it: bit for bit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fixed_seed import (
    FIXTURE,
    ISAS,
    SCRIPTS,
    X86,
    Losses,
    beyond_tolerance,
    compare,
    differences,
    losses_of_runs,
    record,
)
from helpers import REPO_ROOT

CHANGES = ["--clip-coef 0.2", "GAE without the bootstrap value"]


def _without_bootstrap(tmp_path: Path) -> str:
    """A copy of ppo_atari.py with a classic bug: GAE stops bootstrapping from the value after the rollout."""
    source = (REPO_ROOT / SCRIPTS["ppo_atari"]).read_text()
    line = "nextvalues = torch.cat([values[1:], next_value.view(1, -1)])"
    assert source.count(line) == 1, "the GAE line this test breaks has changed: update the test"
    broken = tmp_path / "ppo_atari_bug.py"
    broken.write_text(source.replace(line, "nextvalues = torch.cat([values[1:], 0 * next_value.view(1, -1)])"))
    return str(broken)


@pytest.fixture(scope="module")
def logged_under(tmp_path_factory):
    """`logged_under(isa)`: {script name or change: what its run logged} with the kernels held to `isa`, each
    instruction set's runs made once, together (for the native set, the runs of CHANGES as well)."""
    made = {}

    def logged_under(isa: str) -> dict[str, Losses]:
        if isa not in made:
            workdir = tmp_path_factory.mktemp(isa)
            runs = {name: (script, ()) for name, script in SCRIPTS.items()}
            if isa == "native":
                runs[CHANGES[0]] = (SCRIPTS["ppo_atari"], tuple(CHANGES[0].split()))
                runs[CHANGES[1]] = (_without_bootstrap(workdir), ())
            made[isa] = dict(zip(runs, losses_of_runs(list(runs.values()), workdir, isa=isa)))
        return made[isa]

    return logged_under


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa",
    [
        pytest.param(isa, marks=pytest.mark.skipif(not X86 and isa != "native", reason="x86 instruction sets"))
        for isa in ISAS
    ],
)
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_fixed_seed_losses_match_the_recorded_ones(logged_under, name, isa):
    expected = json.loads(FIXTURE.read_text())[name]
    logged = logged_under(isa)[name]
    assert not beyond_tolerance(logged, expected), differences(logged, expected)


@pytest.mark.slow
@pytest.mark.parametrize("change", CHANGES)
def test_the_tolerance_catches_a_change_of_behaviour(logged_under, change):
    """The tolerance lets other CPUs' last bits through (above) but not a change of what the script computes."""
    expected = json.loads(FIXTURE.read_text())["ppo_atari"]
    logged = logged_under("native")[change]
    assert beyond_tolerance(logged, expected), differences(logged, expected)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        record(Path(sys.argv[2]) if len(sys.argv) > 2 else FIXTURE)
    elif sys.argv[1:2] == ["--compare"] and len(sys.argv) == 3:
        sys.exit(compare(Path(sys.argv[2])))
    else:
        sys.exit("usage: python tests/test_fixed_seed.py --record [FILE] | --compare FILE")
