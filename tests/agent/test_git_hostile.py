"""Host-side git attacked through the workspace: whatever the agent's ``bash`` writes there (a nested
repository with its own config, a ``gitdir:`` file, ``.gitattributes`` naming a driver, a gitlink),
the git the harness runs as root every turn -- and the ``git`` tool, and the same tools served over
MCP -- executes nothing. Each attack's program would create a marker file outside the workspace."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from reasearch.agent.tools.experiments import ExperimentTools, setup_repository
from reasearch.agent.tools.git import GitRepo, GitTools
from reasearch.agent.tools.schema import ToolError
from reasearch.agent.tools.workspace import Workspace
from reasearch.errors import ConfigError
from reasearch.evaluators.repo import read_repo_dir

_CLEAN_ENV = {
    "PATH": "/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
}


def _git(*args: str, cwd: Path, **env: str) -> str:
    """Plain git, as the attacker's ``bash`` runs it (or as an older harness left things)."""
    cp = subprocess.run(["git", *args], cwd=cwd, env={**_CLEAN_ENV, "HOME": str(cwd), **env}, capture_output=True,
                        text=True, check=True)
    return cp.stdout


@pytest.fixture()
def box(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """A run folder: ``workspace`` (committed seed), ``git`` beside it, and ``outside`` for markers."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (tmp_path / "outside").mkdir()
    repo = GitRepo(ws, tmp_path / "git")
    setup_repository(ws, repo, {"train.py": "lr = 1\n"})
    yield SimpleNamespace(ws=ws, repo=repo, tools=GitTools(repo), marker=tmp_path / "outside" / "PWNED",
                          snapshot=ExperimentTools(SimpleNamespace(workspace=Workspace(ws)), repo,
                                                   task=SimpleNamespace()))


def _program(marker: Path) -> str:
    """A filter/hook/pager command that leaves ``marker`` when it runs (and passes its input through)."""
    return f"sh -c 'touch {marker}; cat'"


def _every_git_call(box: SimpleNamespace) -> list[str]:
    """The harness's own git calls (the snapshot's status each turn, an experiment's listing, the seed's add)
    and the tool's; returns the refusals (each call must either refuse or run nothing)."""
    refusals: list[str] = []
    calls = [box.snapshot.current_text, box.repo.head, box.repo.dirty, box.repo.listed_files,
             lambda: box.repo.run(["add", "-A"]), lambda: box.repo.run(["status", "--porcelain"])]
    calls += [lambda c=c: box.tools.git(c) for c in ("status", "add -A", "diff", "diff --cached", 'commit -am "x"',
                                                     "show", "log -p -2", "ls-files")]
    for call in calls:
        try:
            out = call()
        except (ConfigError, ToolError) as exc:
            refusals.append(str(exc))
            continue
        if isinstance(out, str) and "git failed" in out:  # the snapshot reports, never raises
            refusals.append(out)
    return refusals


def _nested_repo(sub: Path, marker: Path) -> None:
    """A repository in ``sub`` with a committed file, a clean filter on every path and an fsmonitor."""
    sub.mkdir(parents=True, exist_ok=True)
    _git("init", "-q", cwd=sub)
    (sub / "f.txt").write_text("hi\n")
    _git("add", "f.txt", cwd=sub)
    _git("commit", "-qm", "x", cwd=sub)
    _git("config", "filter.x.clean", _program(marker), cwd=sub)
    _git("config", "core.fsmonitor", f"touch {marker}", cwd=sub)
    (sub / ".gitattributes").write_text("* filter=x\n")


def test_a_nested_repository_with_a_clean_filter_runs_nothing_on_the_host(box: SimpleNamespace) -> None:
    """The attacker makes ``sub/`` a repository whose own ``.git/config`` sets a clean filter and an
    fsmonitor, then edits it: the harness's next ``git add``/``git status`` would recurse into the
    gitlink and run that config as root."""
    _nested_repo(box.ws / "sub", box.marker)
    refusals = _every_git_call(box)
    (box.ws / "sub" / "f.txt").write_text("changed\n")  # a dirty submodule is what makes status recurse
    refusals += _every_git_call(box)
    assert not box.marker.exists(), "the nested repository's config ran on the host"
    assert refusals and all("sub/.git is a nested git repository" in r for r in refusals), refusals[:3]


def test_a_gitdir_file_in_a_subfolder_runs_nothing_on_the_host(box: SimpleNamespace) -> None:
    """The attacker hides the nested repository's git directory elsewhere in the workspace and leaves a
    ``.git`` FILE (``gitdir: ../../hidden``) in a deep subfolder, so no ``.git`` folder is there to see."""
    _nested_repo(box.ws / "tmp-repo", box.marker)
    (box.ws / "tmp-repo" / ".git").rename(box.ws / "hidden")
    deep = box.ws / "a" / "b"
    deep.mkdir(parents=True)
    (box.ws / "tmp-repo" / "f.txt").rename(deep / "f.txt")
    (box.ws / "tmp-repo" / ".gitattributes").rename(deep / ".gitattributes")
    (box.ws / "tmp-repo").rmdir()
    _git("config", "core.worktree", str(deep), cwd=box.ws, GIT_DIR=str(box.ws / "hidden"))
    (deep / ".git").write_text("gitdir: ../../hidden\n")
    (deep / "f.txt").write_text("changed\n")
    refusals = _every_git_call(box)
    assert not box.marker.exists(), "the hidden repository's config ran on the host"
    assert refusals and all("a/b/.git is a nested git repository (file)" in r for r in refusals), refusals[:3]


def test_the_workspaces_own_git_folder_is_refused_not_used(box: SimpleNamespace) -> None:
    """The attacker writes ``.git/config`` at the workspace root (filter, hooks, fsmonitor, pager,
    external diff, a work tree outside) hoping host-side git takes it for the repository."""
    m = box.marker
    git = box.ws / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text(
        f"[core]\n\tfsmonitor = touch {m}\n\tpager = touch {m}\n\thooksPath = hooks\n\tworktree = /etc\n"
        f"[diff]\n\texternal = touch {m}\n[filter \"x\"]\n\tclean = {_program(m)}\n")
    for hook in ("pre-commit", "post-commit", "post-checkout"):
        (git / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {m}\n")
        (git / "hooks" / hook).chmod(0o755)
    (box.ws / "train.py").write_text("lr = 2\n")
    refusals = _every_git_call(box)
    assert not m.exists(), "the workspace's own git config ran on the host"
    assert refusals and all(".git is a nested git repository" in r for r in refusals), refusals[:3]


def test_gitattributes_naming_a_driver_is_refused_even_if_config_defined_it(box: SimpleNamespace) -> None:
    """The attacker names a filter and a diff driver in ``.gitattributes``, betting on any lapse that lets a
    definition into git's config (here planted in the harness's own git dir): the attribute is refused."""
    _git("config", "filter.x.clean", _program(box.marker), cwd=box.ws, GIT_DIR=str(box.repo.git_dir))
    _git("config", "diff.y.command", f"touch {box.marker}", cwd=box.ws, GIT_DIR=str(box.repo.git_dir))
    (box.ws / "lib").mkdir()
    (box.ws / "lib" / ".gitattributes").write_text("# drivers\n*.py filter=x diff=y\n")
    (box.ws / "lib" / "m.py").write_text("x = 1\n")
    (box.ws / "train.py").write_text("lr = 3\n")
    refusals = _every_git_call(box)
    assert not box.marker.exists(), "a driver named by .gitattributes ran on the host"
    assert refusals and all("lib/.gitattributes sets a filter, diff or merge driver" in r for r in refusals)
    (box.ws / "lib" / ".gitattributes").write_text("*.bin binary\n*.py -diff\n")  # plain attributes are fine
    assert "lib/" in box.tools.git("status --short")


def test_a_gitlink_in_the_index_is_refused_until_reset(box: SimpleNamespace) -> None:
    """The index holds a gitlink (mode 160000: a submodule entry, as a ``git add`` of a nested repository
    by an older harness left it); it is refused by every call but ``reset``, which drops it."""
    head = box.repo.head()
    (box.ws / "sub").mkdir()
    _git("update-index", "--add", "--cacheinfo", f"160000,{head},sub", cwd=box.ws,
         GIT_DIR=str(box.repo.git_dir), GIT_WORK_TREE=str(box.ws))
    refusals = _every_git_call(box)
    assert len(refusals) == 14 and all("gitlink" in r and "at sub" in r for r in refusals), refusals[:3]
    box.tools.git("reset -q -- sub")
    assert "train.py" in box.tools.git("ls-files")
    assert not box.marker.exists()


def test_a_folders_own_git_config_is_never_read_when_it_is_encoded(tmp_path: Path) -> None:
    """A repository folder given to ``reasearch eval`` (or any read of a candidate folder) whose ``.git/config``
    points ``core.worktree`` at a host folder and sets an fsmonitor: the listing is the folder's own files."""
    folder, outside = tmp_path / "repo", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "secret.py").write_text("KEY = 'host secret'\n")
    _git("init", "-q", cwd=folder)
    (folder / "train.py").write_text("x = 1\n")
    (folder / ".gitignore").write_text("*.pt\n")
    (folder / "w.pt").write_text("ignored\n")
    _git("add", "-A", cwd=folder)
    _git("config", "core.worktree", str(outside), cwd=folder)
    _git("config", "core.fsmonitor", f"touch {outside / 'PWNED'}", cwd=folder)
    assert read_repo_dir(folder) == {".gitignore": "*.pt\n", "train.py": "x = 1\n"}
    assert not (outside / "PWNED").exists()
    (folder / "sub").mkdir()
    (folder / "sub" / ".git").write_text(f"gitdir: {folder / '.git'}\n")
    with pytest.raises(ConfigError, match=r"sub/\.git is a nested git repository"):
        read_repo_dir(folder)


def test_the_mcp_server_serves_the_same_guarded_git(tmp_path: Path) -> None:
    """Over MCP (the same tools, another client), the nested repository's filter runs nothing either: the
    ``git`` tool, ``run_experiment``'s listing and the snapshot all refuse it."""
    from reasearch.agent import AgentConfig, ModelSpec
    from reasearch.agent.mcp.driver import McpDriver, _agent
    from reasearch.evaluators.testing import ToyRepoTrainingTask
    from reasearch.runs import Run, open_store
    from reasearch.runs.testing import InstanceExecutor
    from tests.agent.mcp_helpers import call_through_server

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="mcp-client")})
    run = Run.create(open_store(tmp_path), task=task, budget={"experiments": 2}, executor=InstanceExecutor(task),
                     config={"driver": "mcp", "agent": cfg.to_dict(), "mcp": {"max_calls": 50}})
    agent = _agent(run, tmp_path / run.id, exec_fn=None)
    agent.begin()
    marker = tmp_path / "PWNED"
    _nested_repo(agent.workspace.root / "sub", marker)
    driver = McpDriver(agent, max_calls=50)
    for name, args in (("git", {"command": "add -A"}), ("git", {"command": "status"}),
                       ("run_experiment", {"description": "x", "wait_s": 0}), ("get_status", {})):
        out = driver.call(name, args)
        assert name == "get_status" or (out.is_error and "nested git repository" in out.text), out.text
    (agent.workspace.root / "sub" / "f.txt").write_text("changed\n")
    driver.call("git", {"command": "diff"})
    over_the_wire = call_through_server(driver, [("git", {"command": "status"}), ("git", {"command": "add -A"}),
                                                      ("get_status", {})])
    assert over_the_wire[0].is_error and over_the_wire[1].is_error
    assert all("nested git repository" in r.content[0].text for r in over_the_wire[:2])
    assert not marker.exists(), "the nested repository's config ran on the host over MCP"
    assert run.store.evaluations(run.id) == []
    assert os.listdir(tmp_path / run.id / "git")  # the harness's git dir is there, untouched by the refusals


def test_the_pinned_config_alone_stops_a_nested_repository(
    box: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacker wins the race between the harness's check and git's start (the nested repository appears
    in between): with the refusal switched off, the pinned config (no submodule recursion, no fsmonitor) is
    the second layer, and the nested repository's filter still runs nothing -- as a gitlink or dirty."""
    import reasearch.agent.tools.git as git_tool

    monkeypatch.setattr(git_tool, "check_work_tree", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(GitRepo, "check", lambda self: None, raising=False)
    _nested_repo(box.ws / "sub", box.marker)
    box.repo.run(["add", "-A"])  # records sub as a gitlink; its untracked .gitattributes makes it dirty
    calls = (box.repo.dirty, box.snapshot.current_text, lambda: box.tools.git("status"), lambda: box.tools.git("diff"),
             lambda: box.tools.git("show"), box.repo.listed_files, lambda: box.tools.git('commit -am "x"'),
             lambda: box.tools.git("log -p -2"))
    for _ in range(2):
        for call in calls:
            try:
                call()
            except ToolError:  # nothing to commit (the gitlink's changes are ignored): a refusal, not a run
                pass
        (box.ws / "sub" / "f.txt").write_text("changed\n")
    assert not box.marker.exists(), "the nested repository's config ran on the host"


@pytest.mark.parametrize("mode", ["nsjail", "process"])
def test_the_agents_own_bash_makes_the_nested_repository(mode: str) -> None:
    """The attack exactly as the issue tells it: the agent's ``bash`` (in the sandbox, with git there) makes
    ``sub/`` a repository whose config sets a clean filter naming a host path, then the harness's next
    turn runs ``git status``/``git add`` and the agent calls the ``git`` tool. (The repository is owned by
    the sandbox uid, so git 2.35.2+ already declines to enter it as root -- "dubious ownership" -- which
    the refusal must not depend on: a repository owned by the harness's uid is the first test above.)"""
    import tempfile

    from reasearch.agent.tools.workspace import WorkspaceTools
    from reasearch.engine import detect_isolation

    if mode == "nsjail" and not detect_isolation().nsjail_ok and os.environ.get("REASEARCH_REQUIRE_NSJAIL") != "1":
        pytest.skip("nsjail cannot run here (REASEARCH_REQUIRE_NSJAIL=1 makes this a failure)")
    base = Path(tempfile.mkdtemp(prefix="reasearch-git-hostile-", dir="/var/tmp"))
    try:
        base.chmod(0o711)  # the sandbox uid reaches the workspace (pytest's tmp folders are 0700)
        (base / "outside").mkdir()
        marker = base / "outside" / "PWNED"
        ws = base / "workspace"
        ws.mkdir()
        repo = GitRepo(ws, base / "git")
        setup_repository(ws, repo, {"train.py": "lr = 1\n"})
        tools = WorkspaceTools(Workspace(ws), timeout_s=60, sandbox_mode=mode)
        out = tools.bash(
            "mkdir sub && cd sub && git init -q && echo hi > f && git add f && "
            "git -c user.name=a -c user.email=a@b commit -qm x && "
            f"git config filter.x.clean \"sh -c 'touch {marker}; cat'\" && "
            f"git config core.fsmonitor 'touch {marker}' && echo '* filter=x' > .gitattributes && echo changed > f")
        assert out.startswith("[status OK, exit code 0"), out
        box = SimpleNamespace(ws=ws, repo=repo, tools=GitTools(repo), marker=marker,
                              snapshot=ExperimentTools(SimpleNamespace(workspace=Workspace(ws)), repo,
                                                   task=SimpleNamespace()))
        refusals = _every_git_call(box)
        assert not marker.exists(), "the nested repository the agent made ran its filter on the host"
        assert len(refusals) == 14 and all("sub/.git is a nested git repository" in r for r in refusals)
        assert tools.bash("rm -rf sub/.git").startswith("[status OK")  # what the refusal tells the agent to do
        with pytest.raises(ToolError, match="sub/.gitattributes sets a filter"):  # the next layer's refusal
            box.tools.git("status")
        assert tools.bash("rm sub/.gitattributes").startswith("[status OK")
        assert "sub/" in box.tools.git("status --short")
        assert not marker.exists()
    finally:
        subprocess.run(["rm", "-rf", "--", str(base)], check=False)
