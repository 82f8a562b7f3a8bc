"""The product and the lab apart: what users run and import (cleanrl/, cleanrl_utils/) never imports what measures
the project (benchmark/lab/), and the lab's modules live in the lab, not among the shared tools."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT

PRODUCT = [REPO_ROOT / "cleanrl", REPO_ROOT / "cleanrl_utils"]
LAB = REPO_ROOT / "benchmark" / "lab"


def imported_modules(path: Path, root: Path = REPO_ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import statement of a Python file under ``root``, those inside functions included; a
    relative import is resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = path.relative_to(root).parent.parts
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def product_files() -> list[Path]:
    return sorted(path for folder in PRODUCT for path in folder.rglob("*.py"))


def test_no_product_module_imports_the_lab():
    files = product_files()
    assert len(files) > 10 and REPO_ROOT / "cleanrl" / "ppo_atari.py" in files
    offending = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {module}"
        for path in files
        for line, module in imported_modules(path)
        if module.split(".")[0] == "benchmark"
    ]
    assert not offending, "the product imports the lab:\n" + "\n".join(offending)


def test_the_import_scan_sees_every_form_of_import(tmp_path):
    """The scan is not vacuous: plain, from, nested and relative imports of the lab are all found."""
    source = tmp_path / "cleanrl_utils" / "sample.py"
    source.parent.mkdir()
    source.write_text(
        "import benchmark.lab.throughput\nfrom benchmark import lab\n"
        "def f():\n    from benchmark.lab.measured import run_measured\n"
    )
    found = [module for _, module in imported_modules(source, tmp_path)]
    assert {"benchmark.lab.throughput", "benchmark", "benchmark.lab", "benchmark.lab.measured"} <= set(found)
    relative = tmp_path / "benchmark" / "lab" / "x.py"
    relative.parent.mkdir(parents=True)
    relative.write_text("from . import measured\nfrom ..lab.throughput import SCRIPT\n")
    assert {"benchmark.lab.measured", "benchmark.lab.throughput"} <= {
        m for _, m in imported_modules(relative, tmp_path)
    }


def test_the_lab_modules_are_in_the_lab_and_not_among_the_shared_tools():
    lab = {path.stem for path in LAB.glob("*.py")} - {"__init__"}
    assert len(lab) >= 5 and (REPO_ROOT / "benchmark" / "__init__.py").is_file() and (LAB / "__init__.py").is_file()
    shared = {path.stem for path in (REPO_ROOT / "cleanrl_utils").rglob("*.py")}
    assert not lab & shared, f"cleanrl_utils holds lab modules: {sorted(lab & shared)}"


def test_no_shared_module_imports_a_training_script():
    """cleanrl_utils serves the scripts and reads them as files (script_shape.py); it never imports one."""
    offending = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {module}"
        for path in (REPO_ROOT / "cleanrl_utils").rglob("*.py")
        for line, module in imported_modules(path)
        if module.split(".")[0] == "cleanrl"
    ]
    assert not offending, "cleanrl_utils imports a script:\n" + "\n".join(offending)


def test_no_two_shared_modules_import_each_other():
    """Each cleanrl_utils module leans on others one way (imports inside functions count too): no pair of them
    imports each other."""
    root = REPO_ROOT / "cleanrl_utils"
    names = {
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in root.rglob("*.py")
    }
    imports = {name: {m for _, m in imported_modules(path)} & set(names) - {name} for name, path in names.items()}
    assert len(imports) > 20 and any(imports.values())
    pairs = sorted({tuple(sorted((a, b))) for a, used in imports.items() for b in used if a in imports[b]})
    assert not pairs, f"modules that import each other: {pairs}"
