"""CleanRL's command lines for `benchmark.py` and `submit_exp.py`: its renamed flags taken under their new names (or
answered in one line), and a flag carrying a secret refused in one line that never shows its value."""

from __future__ import annotations

import math
import shlex
from typing import Callable, Optional, Sequence, Union

from cleanrl_utils.validation import fail

# CleanRL's flag -> (this project's flag, its value of CleanRL's and the command line), or what to do instead
Rename = tuple[str, Callable[[str, Sequence[str]], str]]
Answer = Union[Rename, str]


def same(value: str, argv: Sequence[str]) -> str:
    return value


def _number(flag: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        fail(f"{flag} {value!r} is not a number")


def per_task(value: str, argv: Sequence[str]) -> str:
    """CleanRL's CPUs of a whole array task, over its Slurm tasks (--slurm-ntasks) as each task's CPUs."""
    tasks = value_of(argv, "--slurm-ntasks") or "1"
    return str(math.ceil(_number("--slurm-total-cpus", value) / max(1, int(_number("--slurm-ntasks", tasks)))))


BUILD = "build and push the repository's Dockerfile yourself (docker build -t IMAGE . && docker push IMAGE), then pass --docker-image IMAGE"
RUNNER: dict[str, Answer] = {
    "--slurm-total-cpus": ("--slurm-cpus-per-task", per_task),
    "--no-auto-tag": "",  # the runner tags no run: what CleanRL's --no-auto-tag asks for
    "--auto-tag": "this runner does not tag runs with git's version (CleanRL's --auto-tag); leave it out, or set "
    "WANDB_TAGS yourself",
}
SUBMIT: dict[str, Answer] = {
    "--num-seed": ("--num-seeds", same),
    "--docker-tag": ("--docker-image", same),
    "--num-vcpu": ("--vcpus", same),
    "--num-memory": ("--memory", same),
    "--num-gpu": ("--gpus", same),
    "--num-hours": ("--timeout-seconds", lambda v, argv: str(round(_number("--num-hours", v) * 3600))),
    "--aws-num-retries": (  # CleanRL's attempts in all, this project's retries after the first
        "--num-retries",
        lambda v, argv: str(max(0, int(_number("--aws-num-retries", v)) - 1)),
    ),
    "--exp-script": "CleanRL's --exp-script names a file of docker commands, which this tool does not write; "
    "--dry-run prints what would be sent",
    "--build": BUILD,
    "-b": BUILD,
    "--push": BUILD,
    "-p": BUILD,
    "--archs": BUILD,
}
SECRET_WORDS = {"key", "token", "secret", "password", "passwd", "apikey"}


def flag_name(word: str) -> str:
    """`--Some_flag=value` -> `--some-flag` (tyro takes either spelling); '' for a word that is no flag."""
    if not word.startswith("-") or word == "-" or word[1:2].isdigit():
        return ""
    return word.split("=", 1)[0].lower().replace("_", "-")


def value_of(argv: Sequence[str], flag: str) -> Optional[str]:
    found = None
    for i, word in enumerate(argv):
        if flag_name(word) == flag:
            found = word.split("=", 1)[1] if "=" in word else (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def refuse_secrets(argv: Sequence[str], how: str) -> None:
    """A flag named like a key or token (not `...-env`, `...-arn`: a variable's name, a secret's address), in the
    command line or in a command it carries: one line naming the flag, never its value."""
    words = list(argv)
    for word in argv:
        if " " in word:
            try:
                words += shlex.split(word)
            except ValueError:
                pass
    for word in words:
        parts = flag_name(word).lstrip("-").split("-")
        if parts[-1] not in ("env", "arn") and SECRET_WORDS & set(parts):
            fail(
                f"{flag_name(word)} would put a secret on the command line, where `ps` and the shell history show it; "
                f"{how}"
            )


def translated(argv: Sequence[str], answers: dict[str, Answer]) -> list[str]:
    """`argv` with CleanRL's renamed flags under this project's names; one line for a flag that has no equal here."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word, name = argv[i], flag_name(argv[i])
        answer = answers.get(name)
        if answer is None:
            out.append(word)
            i += 1
            continue
        if isinstance(answer, str):
            if answer:
                fail(f"{name} is not a flag of this tool: {answer}")
            i += 1
            continue
        new, convert = answer
        if "=" in word:
            value, i = word.split("=", 1)[1], i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            fail(f"{name} needs a value")
        out += [new, convert(value, argv)]
    return out
