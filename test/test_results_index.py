"""benchmark/results/README.md lists every kept run under its README's title and every removed one
with the commit to restore it from, and is what benchmark/results_index.py writes (so a run
committed, or removed, without its index line fails here)."""

from __future__ import annotations

import subprocess

import pytest

from benchmark import results_index


def test_committed_index_is_current():
    assert results_index.main(["--check"]) == 0, "run: python benchmark/results_index.py"


def test_index_lists_runs_by_date_under_their_titles(tmp_path):
    for name, title in [("2026-12-02-b", "Second"), ("2026-12-01-a", "First"), ("2026-12-02-c", "Third")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(f"# {title}\n\nbody\n")
    text = results_index.index_text(tmp_path)
    body = text[len(results_index.PREAMBLE):]
    assert body == (
        "\n## 2026-12-01\n\n- [a](2026-12-01-a/): First\n"
        "\n## 2026-12-02\n\n- [b](2026-12-02-b/): Second\n- [c](2026-12-02-c/): Third\n"
    )


@pytest.mark.parametrize("readme, message", [
    (None, "no README.md"),
    ("Results\n", "first line must be its title"),
])
def test_a_run_without_a_title_is_named(tmp_path, readme, message):
    run = tmp_path / "2026-12-01-untitled"
    run.mkdir()
    if readme is not None:
        (run / "README.md").write_text(readme)
    with pytest.raises(SystemExit, match=message):
        results_index.index_text(tmp_path)


def test_check_fails_on_a_stale_index(tmp_path, monkeypatch, capsys):
    run = tmp_path / "2026-12-01-a"
    run.mkdir()
    (run / "README.md").write_text("# First\n")
    monkeypatch.setattr(results_index, "RESULTS", tmp_path)
    assert results_index.main(["--check"]) == 1
    assert "python benchmark/results_index.py" in capsys.readouterr().err
    assert results_index.main([]) == 0
    assert results_index.main(["--check"]) == 0


def write_removed(results, *lines: str) -> None:
    (results / results_index.REMOVED).write_text("run\tcommit\ttitle\n" + "".join(f"{line}\n" for line in lines))


def test_removed_runs_are_listed_with_how_to_restore_them(tmp_path):
    (tmp_path / "2026-12-02-kept").mkdir()
    (tmp_path / "2026-12-02-kept" / "README.md").write_text("# Kept\n")
    write_removed(tmp_path, "2026-12-01-gone\t6a16696\tGone | with a bar")
    text = results_index.index_text(tmp_path)
    assert text.endswith("| run | what it measured | commit |\n|---|---|---|\n"
                         "| 2026-12-01-gone | Gone \\| with a bar | 6a16696 |\n")
    assert "git checkout COMMIT -- benchmark/results/RUN" in text
    assert "- [kept](2026-12-02-kept/): Kept\n" in text


@pytest.mark.parametrize("line, message", [
    ("2026-12-02-kept\t6a16696\tKept", "still in"),  # listed as removed, but in the tree
    ("2026-12-01-gone\tHEAD\tGone", "each line is RUN<TAB>COMMIT<TAB>TITLE"),  # no commit
    ("2026-12-01-gone\t6a16696", "each line is RUN<TAB>COMMIT<TAB>TITLE"),  # no title
])
def test_a_removed_run_needs_to_be_gone_and_to_name_a_commit(tmp_path, line, message):
    (tmp_path / "2026-12-02-kept").mkdir()
    (tmp_path / "2026-12-02-kept" / "README.md").write_text("# Kept\n")
    write_removed(tmp_path, line)
    with pytest.raises(SystemExit, match=message):
        results_index.index_text(tmp_path)


def test_each_removed_run_is_in_its_commit():
    """Where the clone has the history (CI's may be shallow), the commit listed has the run."""
    rows = results_index.removed_runs(results_index.RESULTS)
    assert rows, "benchmark/results/removed.tsv lists no run"
    commits = {commit for _, commit, _ in rows}
    root = results_index.RESULTS.parents[1]
    if any(subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=root).returncode for c in commits):
        pytest.skip("the listed commits are not in this clone's history")
    for run, commit, title in rows:
        readme = subprocess.run(["git", "show", f"{commit}:benchmark/results/{run}/README.md"], cwd=root,
                                capture_output=True, text=True, check=True).stdout
        assert readme.split("\n", 1)[0] == f"# {title}"
