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
