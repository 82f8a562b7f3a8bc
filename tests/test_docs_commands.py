"""Every command in the fenced bash blocks of README.md and docs/*.md runs as written.

Each command (one part of an `&&` chain, comments dropped, `\\` continuations joined) must match exactly one rule of
RULES, which says how it is checked; a command that no rule covers fails `test_every_command_has_one_rule`, so a new
command in the docs needs a rule here. What the rules do:

- a training script run with `python`: runs for real with a tiny budget appended (later flags win), in a scratch
  folder that stands for the repository root (its `runs/` is where the next commands look);
- the evaluation and plot commands: run as written on what those tiny runs wrote (the eval with 1 episode);
- the Hugging Face Hub: the push runs as written (`--dry-run`, 1 game); the downloads run as written with 1 game, in
  huggingface_hub's offline mode, from a cache filled with the quick start's model (its weights alone, as CleanRL
  saves them, for a CleanRL repository);
- cluster submission and sweeps: run as written when they only print (`--dry-run`), else with `--dry-run` /
  `--workers 0` appended (they print the jobs instead of sending them);
- `torchrun` lines: torchrun's own parser reads the launcher flags and the script's `Args` (tyro) reads the script
  flags, in this process; real torchrun runs are tests/test_multigpu.py's job;
- long benchmarks and servers: `--help` (the benchmark script) and `tensorboard --inspect` (reads the logs, no
  server);
- not run here: the set-up steps (venv, pip; `.ci/run` runs them on a fresh checkout), the system install of Slurm
  (`.ci/run`), the test command itself and the ruff checks before it, and the AWS / Docker commands (they need those services).
Placeholders (RUN_NAME, K, HOST and shell variables set in the block) are replaced by working values.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest
import torch
import tyro
from helpers import FAST, REPO_ROOT, Command, extract_commands, fill_hub_cache, load_script, run_script

DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
TINY = {
    "cleanrl/ppo.py": ["--total-timesteps", "512", "--num-envs", "2", "--num-steps", "64"],
    "cleanrl/ppo_atari.py": ["--total-timesteps", "64", "--num-envs", "2", "--num-steps", "32"],
    "cleanrl/ppo_atari_multigpu.py": [
        "--total-timesteps",
        "64",
        "--num-envs",
        "2",
        "--local-num-envs",
        "2",
        "--num-steps",
        "32",
        "--checkpoint-interval",
        "0",
    ],
}
PLACEHOLDERS = {"K": "0", "HOST": "127.0.0.1"}


def starts(*prefix: str) -> Callable[[list[str]], bool]:
    return lambda tokens: tokens[: len(prefix)] == list(prefix)


def script_run(tokens: list[str]) -> bool:
    return tokens[:1] == ["python"] and len(tokens) > 1 and tokens[1] in TINY


# (rule, matches, how it is checked); the kinds are run by the tests below
RULES: list[tuple[str, Callable[[list[str]], bool], str]] = [
    ("venv set-up", starts("python3", "-m", "venv"), "not run"),
    ("venv set-up", starts(".", ".venv/bin/activate"), "not run"),
    ("package install", starts("pip", "install"), "not run"),
    ("system install of Slurm", starts("bash", ".ci/install_slurm.sh"), "not run"),
    ("the test suite itself", starts("python", "-m", "pytest"), "not run"),
    ("lint and format checks (CI runs them before the suite)", starts("ruff"), "not run"),
    ("AWS service", starts("aws"), "not run"),
    ("Docker daemon", starts("docker"), "not run"),
    ("shell variable", lambda t: len(t) == 1 and re.fullmatch(r"[A-Z_]+=\S+", t[0]) is not None, "not run"),
    ("training script", script_run, "tiny run"),
    ("torchrun launch", starts("torchrun"), "parse"),
    (
        "evaluation",
        lambda t: starts("python", "-m", "cleanrl_utils.evals.ppo_eval")(t) and "--hf-repository" not in t,
        "after training",
    ),
    (
        "hub push",
        lambda t: starts("python", "-m", "cleanrl_utils.huggingface", "push")(t) and "--dry-run" in t,
        "after training",
    ),
    (
        "hub download",
        lambda t: (
            starts("python", "-m", "cleanrl_utils.enjoy")(t)
            or starts("python", "-m", "cleanrl_utils.evals.ppo_eval")(t)
            and "--hf-repository" in t
        ),
        "from the hub cache",
    ),
    ("plot", starts("python", "-m", "cleanrl_utils.plot"), "after training"),
    ("sweep", starts("python", "-m", "cleanrl_utils.benchmark"), "print only"),
    ("cluster submission", starts("python", "cleanrl_utils/submit_exp.py"), "print only"),
    ("throughput benchmark (5-8 min)", starts("bash", "benchmark/throughput.sh"), "help"),
    ("learning benchmark (hours)", starts("bash", "benchmark/learning.sh"), "help"),
    ("seed claims measurement (~30 min)", starts("bash", "benchmark/seed_claims.sh"), "help"),
    ("GPU check (330 s; --cpu: tests/test_gpu_check.py)", starts("bash", "benchmark/gpu_check.sh"), "help"),
    ("GPU check's wheels (downloads)", starts("bash", "benchmark/gpu_wheels.sh"), "help"),
    ("learning report (needs finished runs)", starts("python", "-m", "benchmark.lab.learning"), "help"),
    ("TensorBoard server", starts("tensorboard", "--logdir"), "after training"),
    (
        "tuning study (tests/test_tuner.py runs the README's as written)",
        starts("python", "-m", "cleanrl_utils.tuner"),
        "own test",
    ),
    (
        "tuning example (minutes; its code path is tests/test_tuner.py's)",
        starts("python", "benchmark/tuner_example.py"),
        "not run",
    ),
    ("Optuna dashboard (a server; not installed with the project)", starts("optuna-dashboard"), "not run"),
]


def rules_of(command: Command) -> list[tuple[str, str]]:
    return [(name, kind) for name, matches, kind in RULES if matches(command.tokens)]


def all_commands() -> list[Command]:
    return [c for path in DOC_FILES for c in extract_commands(path)]


def of_kind(kind: str) -> list[Command]:
    return [c for c in all_commands() if [k for _, k in rules_of(c)] == [kind]]


def test_every_command_has_one_rule():
    commands = all_commands()
    assert len(commands) > 20 and any(c.tokens[:2] == ["python", "cleanrl/ppo_atari.py"] for c in commands)
    uncovered = [str(c) for c in commands if len(rules_of(c)) != 1]
    assert not uncovered, "commands in the docs without exactly one rule in RULES:\n" + "\n".join(uncovered)


def test_readme_test_command_is_what_ci_runs():
    readme = [c for c in extract_commands(REPO_ROOT / "README.md") if c.tokens[:3] == ["python", "-m", "pytest"]]
    assert readme and readme[0].tokens == ["python", "-m", "pytest"], readme
    line = next(t for t in (REPO_ROOT / "README.md").read_text().splitlines() if t.endswith("&& python -m pytest"))
    assert line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()


def bash_blocks(path: Path) -> list[list[str]]:
    """The lines of each ```bash block of a markdown file, in order."""
    blocks: list[list[str]] = []
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    return blocks


def test_the_readme_starts_with_two_commands_for_a_fresh_machine_the_main_job_and_the_tests():
    """The README's first two blocks, as a new user with only Python reads them: one line that makes a venv, installs
    PyTorch's CPU build and the project, and starts the main job (Atari PPO on Breakout, which the suite runs with a
    tiny budget like every training command); then the one line that sets up and runs the tests, which is CI's.
    After them: PyPI's torch of the same version for a GPU machine, and the CartPole learning check."""
    readme = REPO_ROOT / "README.md"
    first, second = bash_blocks(readme)[:2]
    assert len(first) == 1 and len(second) == 1, (first, second)
    commands = [c.tokens for c in extract_commands(readme)]
    main_job = commands[:5]
    version = main_job[2][2]
    assert version.startswith("torch==") and main_job == [
        ["python3", "-m", "venv", ".venv"],
        [".", ".venv/bin/activate"],
        ["pip", "install", version, "--index-url", "https://download.pytorch.org/whl/cpu"],
        ["pip", "install", "-e", "."],
        ["python", "cleanrl/ppo_atari.py", "--env-id", "BreakoutNoFrameskip-v4"],
    ], main_job
    assert rules_of(Command("README.md", main_job[-1])) == [("training script", "tiny run")]  # never 10M steps here
    assert second[0] in (REPO_ROOT / ".ci" / "run").read_text().splitlines()  # byte for byte what CI runs
    assert second[0].endswith("&& python -m pytest") and f"pip install {version} -e" in second[0]
    later = commands[commands.index(["python", "-m", "pytest"]) + 1 :]
    gpu = ["pip", "install", version, "-e", "."]
    assert gpu in later and ["python", "cleanrl/ppo.py", "--total-timesteps", "100000"] in later
    lines = readme.read_text().splitlines()  # the GPU line under the comment that says for what
    at = lines.index(shlex.join(gpu))
    assert lines[at - 1].startswith("# ") and "with an NVIDIA GPU" in lines[at - 1], lines[at - 1]


def test_torchrun_lines_parse():
    from torch.distributed.run import get_args_parser

    lines = of_kind("parse")
    assert len(lines) >= 3
    for command in lines:
        tokens = [re.sub(r"\b(K|HOST)\b", lambda m: PLACEHOLDERS[m.group(1)], t) for t in command.tokens[1:]]
        script = next(i for i, t in enumerate(tokens) if t.endswith(".py"))
        try:
            launcher = get_args_parser().parse_args(tokens[: script + 1])
            args = tyro.cli(
                load_script(tokens[script], "doc_" + Path(tokens[script]).stem).Args, args=tokens[script + 1 :]
            )
        except SystemExit as exc:
            pytest.fail(f"{command} does not parse (exit {exc.code})")
        assert launcher.training_script == tokens[script] and args is not None


def run_command(tokens: list[str], cwd: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """Run a doc command in `cwd`; `python ...` runs with this interpreter and the repository on PYTHONPATH."""
    if tokens[0] == "python":
        return run_script(tokens[1:], cwd=cwd, timeout=timeout, env=FAST)
    # shell scripts and console scripts (tensorboard) of this interpreter's environment, activated or not
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return subprocess.run(tokens, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_commands_run_as_written(tmp_path):
    # the scratch folder stands for the repository root: the scripts and benchmark files are where the docs say
    for name in ("cleanrl", "cleanrl_utils", "benchmark"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    first = []  # (command, how it is run)
    for seed, command in enumerate(of_kind("tiny run"), 1):  # own seeds: run folders started in the same second
        extra = ["--save-model"] if command.tokens[1] == "cleanrl/ppo_atari.py" else []
        first.append((command, command.tokens + TINY[command.tokens[1]] + ["--seed", str(seed), *extra]))
    for command in of_kind("print only"):
        done = (
            "--dry-run" in command.tokens
            or "--workers" in command.tokens
            and command.tokens[command.tokens.index("--workers") + 1] == "0"
        )
        flag = ["--dry-run"] if "submit_exp" in command.tokens[1] else ["--workers", "0"]
        first.append((command, command.tokens + ([] if done else flag)))
    for command in of_kind("help"):
        first.append((command, command.tokens + ["--help"]))
    kinds = {"tiny run", "print only", "help"}
    assert {c.where for c, _ in first} and all(k in kinds for c, _ in first for _, k in rules_of(c))

    failures = []
    with ThreadPoolExecutor(3) as pool:
        for (command, argv), res in zip(first, pool.map(lambda job: run_command(job[1], tmp_path), first)):
            if res.returncode != 0:
                failures.append(f"{command}\n  ran: {shlex.join(argv)}\n  {res.stderr[-1500:]}")
    assert not failures, "\n".join(failures)

    # what reads the runs: evaluation (of the quick start's model), plots, TensorBoard
    model = next((tmp_path / "runs").glob("BreakoutNoFrameskip-v4__ppo_atari__*/ppo_atari.cleanrl_model"))
    for command in of_kind("after training"):
        argv = [t.replace("RUN_NAME", model.parent.name) for t in command.tokens]
        if "cleanrl_utils.evals.ppo_eval" in argv or "cleanrl_utils.huggingface" in argv:
            argv += ["--eval-episodes", "1"]
        if argv[0] == "tensorboard":
            argv.insert(1, "--inspect")
        res = run_command(argv, tmp_path)
        assert res.returncode == 0, f"{command}\n  ran: {shlex.join(argv)}\n  {res.stderr[-1500:]}"
        if "cleanrl_utils.plot" in argv:
            output = Path(tmp_path, argv[argv.index("--output") + 1])
            assert output.with_suffix(".png").stat().st_size > 0
            assert (tmp_path / "docs") not in output.parents, "the plot example must not write into docs/"
        if "cleanrl_utils.huggingface" in argv:
            assert "nothing was sent" in res.stdout and (model.parent / "huggingface" / "README.md").exists()

    # the downloads, offline, from huggingface_hub's cache (tests/test_hub.py fills it the same way)
    weights = tmp_path / "cleanrl_format.cleanrl_model"
    torch.save(torch.load(model, weights_only=True)["model"], weights)  # what CleanRL's ppo_atari.py saves
    hub = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    for command in of_kind("from the hub cache"):
        args = (
            tyro.cli(load_script("cleanrl_utils/enjoy.py", "doc_enjoy").Args, args=command.tokens[3:])
            if "cleanrl_utils.enjoy" in command.tokens
            else None
        )
        repo_id = (
            command.tokens[command.tokens.index("--hf-repository") + 1]
            if args is None
            else args.hf_repository or f"{args.hf_entity}/{args.env_id}-{args.exp_name}-seed{args.seed}"
        )
        if not (tmp_path / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))).exists():
            fill_hub_cache(tmp_path / "hf", repo_id, {"ppo_atari.cleanrl_model": weights})
        argv = command.tokens + ["--eval-episodes", "1"]
        res = run_script(argv[1:], cwd=tmp_path, timeout=300, env={**FAST, **hub})
        assert res.returncode == 0 and "1 episodes: mean return" in res.stdout, (
            f"{command}\n  ran: {shlex.join(argv)}\n  {res.stderr[-1500:]}"
        )


# ---------------------------------------------------------------- written for users

USER_FACING = [*DOC_FILES, *sorted((REPO_ROOT / "benchmark").glob("*.sh"))]
# notes on how the work went: issue numbers, paths of the machine it ran on, commits a command ran at
INTERNAL = re.compile(r"\bissue #?[0-9]+|/work/|\bat [0-9a-f]{7}\b")


def user_facing_lines_matching(pattern: re.Pattern) -> list[str]:
    """`path:line: text` of every line of the docs, benchmark scripts and code (the lab's too) that `pattern` finds."""
    sources = [
        *USER_FACING,
        *REPO_ROOT.glob("cleanrl/*.py"),
        *REPO_ROOT.glob("cleanrl_utils/**/*.py"),
        *REPO_ROOT.glob("benchmark/**/*.py"),
    ]
    return [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()[:120]}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def test_docs_and_code_comments_hold_no_internal_notes():
    found = user_facing_lines_matching(INTERNAL)
    assert not found, "\n".join(found)
    assert INTERNAL.search("the targets of issue 5") and INTERNAL.search("--runs-dir /work/x  # at a539522")


def args_docstrings(script: Path) -> dict[str, str]:
    """The help text of every field of the script's `Args`, as written (tyro shows the docstring under the field)."""
    import ast

    tree = ast.parse(script.read_text())
    args = next(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "Args")
    docs = {}
    for field, doc in zip(args.body, args.body[1:]):
        if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            docs[field.target.id] = doc.value.value
    return docs


def test_help_texts_have_no_stray_line_breaks_and_quote_the_extras():
    scripts = [REPO_ROOT / "cleanrl" / name for name in ("ppo.py", "ppo_atari.py", "ppo_atari_multigpu.py")]
    scripts.append(REPO_ROOT / "cleanrl_utils" / "evals" / "ppo_eval.py")
    for script in scripts:
        docs = args_docstrings(script)
        assert "total_timesteps" in docs or "model_path" in docs
        # tyro keeps the line break before an indented continuation line: the help would break mid-sentence
        broken = {name: doc for name, doc in docs.items() if "\n" in doc}
        assert not broken, f"{script.name}: {broken}"
    # `pip install -e .[track]` unquoted is a glob in zsh ("no matches found"): every hint quotes the extra
    sources = [
        *REPO_ROOT.glob("cleanrl/*.py"),
        *REPO_ROOT.glob("cleanrl_utils/**/*.py"),
        *REPO_ROOT.glob("benchmark/**/*.py"),
        *USER_FACING,
    ]
    unquoted = [
        f"{path.relative_to(REPO_ROOT)}: {m.group(0)}"
        for path in sources
        for m in re.finditer(r"pip install -e \.\[\w+\]", path.read_text())
    ]
    assert not unquoted, "\n".join(unquoted)


def test_what_the_commands_write_is_ignored_by_git():
    ignored = set((REPO_ROOT / ".gitignore").read_text().split())
    assert {"runs/", "videos/", "plots/", "benchmark_logs/", "wandb/", "wheels/"} <= ignored


# what was removed: `--overlap` and its module, which owned the rollout loop (`collect_rollout`)
REMOVED = re.compile(r"--overlap\b|\boverlap\.py\b|\bcollect_rollout")


def test_nothing_user_facing_names_what_was_removed():
    found = user_facing_lines_matching(REMOVED)
    # one sentence of docs/throughput.md says that it was dropped, and why
    dropped = [line for line in found if line.startswith("docs/throughput.md:")]
    assert len(dropped) == 1 and [line for line in found if line not in dropped] == [], "\n".join(found)


# a path of this repository in the docs (a placeholder such as `gpu_<GPU name>.md` is not one)
HUB_REPO = re.compile(r"cleanrl/[A-Z]\w*-v\d+-\w+-seed\d+")  # CleanRL's models on the hub, e.g. cleanrl/Pong...-seed1
REPO_PATH = re.compile(r"(?<![\w/.-])((?:cleanrl|cleanrl_utils|benchmark|tests|docs|\.ci)/[\w/.-]*\w)(?![\w<{])")


def test_every_file_and_link_the_docs_name_exists_and_the_index_lists_every_page():
    missing = []
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            named = [REPO_ROOT / m.group(1) for m in REPO_PATH.finditer(line) if not HUB_REPO.fullmatch(m.group(1))]
            linked = [
                path.parent / m.group(1)
                for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line)
                if not m.group(1).startswith(("http://", "https://"))
            ]
            missing += [
                f"{path.relative_to(REPO_ROOT)}:{number}: {os.path.relpath(target, REPO_ROOT)}"
                for target in dict.fromkeys(named + linked)
                if not target.exists()
            ]
    assert not missing, "\n".join(missing)
    index = (REPO_ROOT / "docs" / "README.md").read_text()
    pages = [p.name for p in (REPO_ROOT / "docs").glob("*.md") if p.name != "README.md"]
    assert pages and all(f"]({name})" in index for name in pages), index
