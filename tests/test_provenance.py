"""The commit a result names: git's own, or the one a sender states for a copy without
its history."""

import subprocess

from sparse_attn_plugin import provenance


def test_a_git_checkout_names_its_commit(monkeypatch):
    monkeypatch.setenv("SPARSE_ATTN_COMMIT", "not-this")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=provenance.REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert provenance.git_commit().startswith(head)


def test_a_copy_without_history_names_the_stated_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)  # a folder outside any git
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("SPARSE_ATTN_COMMIT", raising=False)
    assert provenance.git_commit() == "unknown"
    monkeypatch.setenv("SPARSE_ATTN_COMMIT", "74ebd900990b")
    assert provenance.git_commit() == "74ebd900990b (stated)"
    assert "- commit: `74ebd900990b (stated)`" in provenance.provenance_header("cmd")


def test_results_a_run_rewrites_do_not_make_the_checkout_dirty(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("code.py", "results/table.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("first\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "results" / "table.md").write_text("rewritten by the run\n")
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "code.py").write_text("changed\n")
    assert provenance.git_commit().endswith("+dirty")
