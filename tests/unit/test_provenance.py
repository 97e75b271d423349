"""The commit a result names: git's own, or the one a sender states for a copy without
its history."""

import subprocess

from sparse_attn_experiments import provenance


def test_a_git_checkout_names_its_commit(monkeypatch):
    monkeypatch.setenv("SPARSE_ATTN_COMMIT", "not-this")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=provenance.CHECKOUT,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert provenance.git_commit().startswith(head)


def test_a_copy_without_history_names_the_stated_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "CHECKOUT", tmp_path.resolve())  # outside any git
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("SPARSE_ATTN_COMMIT", raising=False)
    assert provenance.git_commit() == "unknown"
    monkeypatch.setenv("SPARSE_ATTN_COMMIT", "74ebd900990b")
    assert provenance.git_commit() == "74ebd900990b (stated)"
    assert "- commit: `74ebd900990b (stated)`" in provenance.provenance_header("cmd")


def a_repository(folder, *names):
    """A git repository in ``folder`` with one commit of ``names`` (each holding "first")."""
    def git(*args):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)

    git("init", "-q")
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("first\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")


def test_the_commit_is_the_packages_clone_whatever_the_working_folder(tmp_path, monkeypatch):
    expected = provenance.git_commit()
    a_repository(tmp_path, "paper/notes.txt")     # the researcher's own project
    monkeypatch.chdir(tmp_path)
    assert provenance.git_commit() == expected != "unknown"


def test_a_repository_that_only_contains_the_package_is_not_its_clone(tmp_path, monkeypatch):
    """A ``.venv`` with the package in site-packages, inside some other project."""
    a_repository(tmp_path, "paper/notes.txt", "venv/site-packages/sparse_attn_plugin/x.py")
    monkeypatch.setattr(provenance, "CHECKOUT", (tmp_path / "venv" / "site-packages").resolve())
    monkeypatch.delenv("SPARSE_ATTN_COMMIT", raising=False)
    assert provenance.git_commit() == "unknown"


def test_results_a_run_rewrites_do_not_make_the_checkout_dirty(tmp_path, monkeypatch):
    a_repository(tmp_path, "code.py", "results/table.md")
    monkeypatch.setattr(provenance, "CHECKOUT", tmp_path.resolve())
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "results" / "table.md").write_text("rewritten by the run\n")
    assert not provenance.git_commit().endswith("+dirty")
    (tmp_path / "code.py").write_text("changed\n")
    assert provenance.git_commit().endswith("+dirty")


def test_the_gpu_a_machine_line_names_is_read_back(monkeypatch):
    import torch

    assert provenance.gpu_of(provenance.describe_machine()) is None or torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    assert provenance.gpu_of(provenance.describe_machine()) == "NVIDIA H100 80GB HBM3"
    assert provenance.gpu_of("AMD EPYC, 2 cores, torch 2.13.0+cpu (2 threads); Python "
                             "3.11.7, Linux") is None
