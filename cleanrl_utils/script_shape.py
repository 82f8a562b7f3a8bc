"""A training script's shape, read from the script itself and never from its file name (so a copy under any name
is read the same way): its `Args`, how it starts, which envs it takes, and its module."""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Optional


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTS = {"start_run": False, "start_rank_run": True}  # a script's start call -> whether it runs under torchrun


def find_script(script: str) -> Optional[str]:
    """The script's absolute path: as given, else relative to this repository (a job's folder may be another)."""
    for path in (script, os.path.join(REPO, script)):
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


@dataclasses.dataclass(frozen=True)
class Script:
    """What a tool needs to know of a training script."""

    path: str  # its absolute path
    start: Optional[str]  # the cleanrl_utils call it starts its run with (`start_run`, `start_rank_run`), or None
    atari: Optional[bool]  # its `check_env_id(..., atari=...)`: Atari games only (True), none (False), or either

    @property
    def resumes(self) -> bool:
        """Whether it continues runs (`--run-name NAME --resume auto`)."""
        return self.start is not None

    @property
    def torchrun(self) -> bool:
        """Whether it is a torch.distributed script, started by torchrun (one process per rank)."""
        return bool(STARTS.get(self.start))

    @property
    def args_type(self) -> type:
        return load_module(self.path).Args

    def has_field(self, name: str) -> bool:
        return any(f.name == name for f in dataclasses.fields(self.args_type))

    def default(self, name: str):
        """The default of its field `name` (None if it has no such field)."""
        field = next((f for f in dataclasses.fields(self.args_type) if f.name == name), None)
        if field is None or field.default is dataclasses.MISSING:
            return None
        return field.default


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


@functools.lru_cache(maxsize=None)
def read_script(script: str) -> Optional[Script]:
    """The shape of `script` (see `find_script`), or None when it is not found or lacks an `Args` class or an
    `if __name__ == "__main__":` block (so that loading it runs nothing)."""
    path = find_script(script)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    has_args = any(isinstance(node, ast.ClassDef) and node.name == "Args" for node in tree.body)
    main = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    if not has_args or not main:
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    start = next((called_name(c) for c in calls if called_name(c) in STARTS), None)
    atari = None
    for call in (c for c in calls if called_name(c) == "check_env_id"):
        for keyword in call.keywords:
            if keyword.arg == "atari" and isinstance(keyword.value, ast.Constant):
                atari = keyword.value.value
    return Script(path, start, atari)


@functools.lru_cache(maxsize=None)
def load_module(path: str) -> ModuleType:
    """The script's definitions (`Args`, `Agent`...), loaded once as a module of its own name; its run, under
    `if __name__ == "__main__":`, does not start."""
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"cleanrl_script_{stem}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # tyro reads Args' docstrings by its module
    spec.loader.exec_module(module)
    return module
