"""The committed reports are what the lab writes from the committed measurements and exports: each is rebuilt from a
copy of docs/ and must come out unchanged (so no rule or figure on a page drifts from the code that states it)."""

import shutil

import pytest
import tyro
from helpers import REPO_ROOT

from benchmark.lab import learning, seed_claims, throughput


@pytest.mark.parametrize(
    "profile, page", [("quick", "results.md"), ("bf16", "results_bf16.md"), ("full-cpu", "results_10m.md")]
)
def test_each_committed_results_page_is_what_its_generator_writes_from_the_committed_exports(
    tmp_path, monkeypatch, profile, page
):
    # the README too: the full-length report rewrites its table
    pytest.importorskip("matplotlib")
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
    shutil.copy(REPO_ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.chdir(tmp_path)
    assert learning.report(tyro.cli(learning.Args, args=["report", "--profile", profile])) == 0
    for path in [f"docs/{page}", "README.md"]:
        assert (tmp_path / path).read_text() == (REPO_ROOT / path).read_text(), f"{path}: run the report and commit it"


def test_the_committed_parallel_sampling_claims_are_what_their_generator_writes(tmp_path, monkeypatch):
    # the claims section of docs/results.md and its JSON, rebuilt from the committed measurement and learning exports
    pytest.importorskip("matplotlib")
    docs = tmp_path / "docs"
    shutil.copytree(REPO_ROOT / "docs", docs)
    results = docs / "results"
    where = ["--results-dir", str(results), "--report-path", str(docs / "results.md")]
    seed_claims.main(
        tyro.cli(
            seed_claims.Args, args=["--report-only", "--tag", "cpu2", *where, "--learning-results-dir", str(results)]
        )
    )
    for path in ["docs/results.md", "docs/results/seed_claims_cpu2.json"]:
        rebuilt = (tmp_path / path).read_text().replace(str(results), "docs/results")  # the exports' folder, named
        assert rebuilt == (REPO_ROOT / path).read_text(), f"{path}: run the report and commit it"


@pytest.mark.parametrize("tag", ["cpu2", "cpu2-xeon"])  # AMD EPYC; Intel Xeon with AMX
def test_the_committed_throughput_report_is_what_its_generator_writes(tmp_path, tag):
    pytest.importorskip("matplotlib")
    shutil.copytree(REPO_ROOT / "docs" / "benchmarks", tmp_path / "benchmarks")
    throughput.main(
        tyro.cli(throughput.Args, args=["--report-only", "--tag", tag, "--out-dir", str(tmp_path / "benchmarks")])
    )
    page = f"throughput_{tag}.md"
    assert (tmp_path / "benchmarks" / page).read_text() == (REPO_ROOT / "docs" / "benchmarks" / page).read_text()
