"""benchmark/results/README.md lists every committed run under its README's title, and is what
benchmark/results_index.py writes (so a run committed without its index line fails here)."""

from __future__ import annotations

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
