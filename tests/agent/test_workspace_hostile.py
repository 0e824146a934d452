"""The workspace attacked by the agent's own jailed ``bash``: planted symlinks, FIFOs, oversized and
numerous files. The harness runs as root here (the real situation): nothing it reads or writes may
leave the workspace, nothing from the host may reach the model, and the workspace stays in its quota."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent import Agent
from reasearch.agent.tools import ToolError, Workspace, WorkspaceTools
from reasearch.errors import ConfigError
from reasearch.runs import Run

SECRET = "SECRET-API-KEY-do-not-leak-4242"


@pytest.fixture()
def open_dir() -> Iterator[Path]:
    """A parent the sandbox uid can reach (pytest's tmp folders are 0700), with a secret beside the workspace."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-hostile-", dir="/var/tmp"))
    d.chmod(0o711)
    (d / "outside").mkdir()
    (d / "outside" / "secret.txt").write_text(SECRET)
    yield d
    subprocess.run(["rm", "-rf", "--", str(d)], check=False)  # shutil.rmtree recurses: deep trees break it


def _tools(root: Path, **kw: Any) -> WorkspaceTools:
    return WorkspaceTools(Workspace(root / "workspace", **kw), timeout_s=60)


def _ok(out: str) -> str:
    assert out.startswith("[status OK, exit code 0"), out
    return out


# ---------------------------------------------------------------- item 1: writes never leave the workspace
def test_a_symlink_planted_at_the_old_temp_name_does_not_redirect_write_file(open_dir: Path) -> None:
    tools = _tools(open_dir)
    target = open_dir / "outside" / "secret.txt"
    # The jailed bash plants a link at the name the harness used for its temporary file.
    _ok(
        tools.bash(f"ln -s {target} .candidate.py.tmp && ln -s {target} .lessons.md.tmp && ln -s {target} .TASK.md.tmp")
    )
    tools.write_file("candidate.py", "def run():\n    return 1\n")
    tools.workspace.write_text("lessons.md", "# lessons\n")
    assert target.read_text() == SECRET  # the host file is untouched
    assert (tools.workspace.root / "candidate.py").read_text() == "def run():\n    return 1\n"
    assert not (tools.workspace.root / "candidate.py").is_symlink()


def test_a_symlinked_directory_component_is_refused(open_dir: Path) -> None:
    tools = _tools(open_dir)
    _ok(tools.bash(f"ln -s {open_dir / 'outside'} sub && mkdir real && ln -s ../sub real/deeper"))
    for path in ("sub/secret.txt", "sub/new.txt", "real/deeper/new.txt"):
        with pytest.raises(ToolError, match="symlink"):
            tools.write_file(path, "pwned")
        with pytest.raises(ToolError, match="symlink"):
            tools.read_file(path)
    assert sorted(p.name for p in (open_dir / "outside").iterdir()) == ["secret.txt"]
    assert (open_dir / "outside" / "secret.txt").read_text() == SECRET
    with pytest.raises(ToolError, match="symlink"):
        tools.list_files("sub")


def test_a_symlink_at_the_target_is_refused_and_never_written_through(open_dir: Path) -> None:
    tools = _tools(open_dir)
    _ok(tools.bash(f"ln -s {open_dir / 'outside' / 'secret.txt'} notes.md"))
    with pytest.raises(ToolError, match="symlink"):
        tools.write_file("notes.md", "pwned")
    assert (open_dir / "outside" / "secret.txt").read_text() == SECRET


# ---------------------------------------------------------------- item 2: host files never reach the model
@pytest.fixture()
def agent_in(open_dir: Path, make_agent: Callable[..., tuple[Agent, Run]]) -> Agent:
    agent, _ = make_agent([], root=str(open_dir / "run"))
    agent.begin()  # writes TASK.md, candidate.py and lessons.md
    return agent


@pytest.mark.parametrize("target", ["/proc/self/environ", "SECRET_FILE"])
def test_symlinked_lessons_and_candidate_do_not_reach_the_snapshot(
    agent_in: Agent, open_dir: Path, target: str
) -> None:
    target = str(open_dir / "outside" / "secret.txt") if target == "SECRET_FILE" else target
    environ = Path("/proc/self/environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
    marker = SECRET if "secret" in target else next(ln for ln in environ.splitlines() if ln.startswith("PATH="))
    ws = agent_in.workspace.root
    for name in ("lessons.md", "candidate.py"):
        (ws / name).unlink()
        os.symlink(target, ws / name)
    text = agent_in.snapshot_text()
    assert marker not in text and marker not in agent_in.lessons()
    assert "symlink" in text and "lessons.md is not shown" in text and "candidate.py = unreadable" in text
    with pytest.raises(ToolError, match="symlink"):
        agent_in.tools["get_current_code"]({})
    with pytest.raises(ToolError, match="symlink"):
        agent_in.tools["evaluate"]({})


def test_a_fifo_or_a_huge_lessons_file_neither_blocks_nor_floods_the_harness(agent_in: Agent) -> None:
    ws = agent_in.workspace.root
    (ws / "lessons.md").unlink()
    os.mkfifo(ws / "lessons.md")
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(agent_in.snapshot_text()), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "reading a FIFO lessons.md blocked the harness"
    assert "FIFO" in box[0]
    (ws / "lessons.md").unlink()
    with open(ws / "lessons.md", "wb") as f:  # sparse: 64 MiB of apparent size
        f.truncate(64 << 20)
    assert len(agent_in.lessons()) <= 256 * 1024
    with open(ws / "candidate.py", "wb") as f:
        f.truncate(64 << 20)
    assert "over the" in agent_in.snapshot_text()
    with pytest.raises(ToolError, match="over the"):
        agent_in.tools["evaluate"]({})


# ---------------------------------------------------------------- item 3: the workspace quota
def test_a_bash_call_writing_400_mb_is_rolled_back(open_dir: Path) -> None:
    tools = _tools(open_dir)
    tools.write_file("keep.txt", "kept")
    _ok(tools.bash("echo start > log.txt"))
    with pytest.raises(ToolError, match="over its quota") as info:
        # 25 files of 16 MB each (the per-file limit), and the pre-existing log grows too.
        tools.bash("mkdir -p big && for i in $(seq 25); do head -c 16000000 /dev/zero > big/f$i; done; "
                   "head -c 1000000 /dev/zero >> log.txt; echo done")
    assert "stdout:\ndone" in str(info.value) and "new entries removed, 1 grown files cut back" in str(info.value)
    used = tools.workspace.fs.usage()
    assert used.bytes <= tools.workspace.quota.max_bytes and used.inodes <= tools.workspace.quota.max_inodes
    assert not (tools.workspace.root / "big").exists()
    assert (tools.workspace.root / "keep.txt").read_text() == "kept"
    assert (tools.workspace.root / "log.txt").read_text() == "start\n"  # cut back to its earlier size


def test_a_python_exec_making_30k_files_is_rolled_back(open_dir: Path) -> None:
    tools = _tools(open_dir)
    with pytest.raises(ToolError, match="over its quota"):
        tools.python_exec("import os\nos.mkdir('many')\nfor i in range(30000):\n    open(f'many/{i}', 'w').close()\n")
    used = tools.workspace.fs.usage()
    assert used.inodes < 100 and not (tools.workspace.root / "many").exists()


def test_rollback_never_follows_links_out_and_survives_a_deep_tree(open_dir: Path) -> None:
    tools = _tools(open_dir)
    # Within the quota: a link to the outside folder and a 3000-deep chain of folders stay (nothing to roll back).
    out = _ok(tools.python_exec(
        f"import os\nos.symlink({str(open_dir / 'outside')!r}, 'out')\n"
        "for i in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nprint('made')"))
    assert "made" in out
    assert "again" in _ok(tools.bash("echo again"))  # a deep tree left in the workspace breaks no later call
    with pytest.raises(ToolError, match="over its quota"):
        tools.python_exec(
            f"import os\nos.symlink({str(open_dir / 'outside')!r}, 'out2')\n"
            "p = os.getcwd()\nfor i in range(3000):\n    os.mkdir('e')\n    os.chdir('e')\n"
            "for i in range(25):\n    open(f'f{i}', 'wb').write(b'x' * 15_000_000)\n")
    assert (open_dir / "outside" / "secret.txt").read_text() == SECRET  # the links were unlinked, not entered
    assert not (tools.workspace.root / "e").exists() and not (tools.workspace.root / "out2").is_symlink()
    assert (tools.workspace.root / "out").is_symlink()  # made by an earlier call within the quota: kept
    used = tools.workspace.fs.usage()
    assert used.bytes <= tools.workspace.quota.max_bytes


def test_write_file_is_refused_over_the_quota(tmp_path: Path) -> None:
    from reasearch.agent.tools.workspace import Quota

    ws = Workspace(tmp_path / "ws", quota=Quota(max_bytes=3 << 20, max_inodes=16))
    tools = WorkspaceTools(ws)
    tools.write_file("a.txt", "a" * (1 << 20))
    tools.write_file("a.txt", "b" * ((2 << 20) - 8192))  # replacing a file frees what it held
    with pytest.raises(ToolError, match="over its quota"):
        tools.write_file("b.txt", "c" * (3 << 19))
    for i in range(10):
        tools.write_file(f"s{i}.txt", "x")
    with pytest.raises(ToolError, match="over its quota"):  # 12 inodes + 5 new ones > 16
        tools.write_file("a/b/c/d/e.txt", "x")
    assert not (ws.root / "b.txt").exists() and not (ws.root / "a").exists()


def test_rollback_keeps_what_was_there_and_runs_even_when_the_runner_fails(tmp_path: Path) -> None:
    from reasearch.agent.tools.workspace import Quota

    ws = Workspace(tmp_path / "ws", quota=Quota(max_bytes=2 << 20, max_inodes=64))
    (ws.root / "old.txt").write_text("0123456789")
    (ws.root / "keep").mkdir()
    (ws.root / "keep" / "a.txt").write_text("a")

    def hostile(argv: list[str], **kw: Any) -> Any:
        (ws.root / "old.txt").write_text("abcdefghij" * 1000)  # grown in place: cut back to 10 bytes
        (ws.root / "keep" / "a.txt").write_text("b")  # changed within its size: kept
        for i in range(100):
            (ws.root / "keep" / f"new{i}").write_text("x")
        raise RuntimeError("the runner broke")

    tools = WorkspaceTools(ws, exec_fn=hostile)
    with pytest.raises(RuntimeError, match="the runner broke"):
        tools.bash("anything")
    assert sorted(os.listdir(ws.root / "keep")) == ["a.txt"]
    assert (ws.root / "keep" / "a.txt").read_text() == "b"
    assert (ws.root / "old.txt").read_text() == "abcdefghij"
    assert ws.fs.usage().inodes <= 64


def test_the_quota_comes_from_the_agent_config(make_agent: Callable[..., tuple[Agent, Run]]) -> None:
    from reasearch.agent import AgentConfig
    from reasearch.agent.tools.workspace import Quota
    from reasearch.errors import ConfigError

    agent, _ = make_agent([], workspace_max_mb=5, workspace_max_files=100)
    assert agent.workspace.quota == Quota(5 << 20, 100)
    assert AgentConfig.from_dict(agent.config.to_dict()).workspace_max_files == 100  # stored, read back on resume
    with pytest.raises(ConfigError, match="workspace_max_files"):
        AgentConfig(workspace_max_files=3)


# ------------------------------------------------------- issue 26 item 9: one guarded reader for every host-side read
def _path_line() -> str:
    """A line of this process's own environment, as ``/proc/self/environ`` shows it to the harness."""
    environ = Path("/proc/self/environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
    return next(ln for ln in environ.splitlines() if ln.startswith("PATH="))


def test_a_symlinked_parent_folder_leaks_no_environment_into_an_experiment_over_mcp(tmp_path: Path) -> None:
    """The attacker commits ``sub/environ`` and ``sub/passwd`` (regular files), then replaces ``sub`` with a
    symlink to ``/proc/self`` (or ``/etc``): ``run_experiment`` would read the driver's environment (its API
    key) into the candidate (``sub`` itself is in ``.gitignore``, so only the committed paths are listed),
    and ``read_file`` into the model's context. Over MCP, the same tools."""
    from reasearch.agent import AgentConfig, ModelSpec
    from reasearch.agent.mcp.driver import McpDriver, _agent
    from reasearch.evaluators.testing import ToyRepoTrainingTask
    from reasearch.runs import Run as StoredRun
    from reasearch.runs import open_store
    from reasearch.runs.testing import InstanceExecutor
    from tests.agent.mcp_helpers import call_through_server, text

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="mcp-client")})
    run = StoredRun.create(open_store(tmp_path), task=task, budget={"experiments": 2}, executor=InstanceExecutor(task),
                           config={"driver": "mcp", "agent": cfg.to_dict(), "mcp": {"max_calls": 50}})
    agent = _agent(run, tmp_path / run.id, exec_fn=None)
    agent.begin()
    driver = McpDriver(agent, max_calls=50)
    for name in ("sub/environ", "sub/passwd"):
        assert not driver.call("write_file", {"path": name, "content": "harmless\n"}).is_error
    assert not driver.call("git", {"command": "add -A"}).is_error
    assert not driver.call("git", {"command": 'commit -m "sub"'}).is_error
    ws = agent.workspace.root
    ignore = agent.workspace.read_text(".gitignore")  # the link itself is ignored, its committed files stay listed
    assert not driver.call("write_file", {"path": ".gitignore", "content": ignore + "sub\n"}).is_error
    secrets = [_path_line(), Path("/etc/passwd").read_text().splitlines()[0]]
    for target in ("/proc/self", "/etc"):
        if (ws / "sub").is_symlink():
            (ws / "sub").unlink()
        else:
            for f in ("environ", "passwd"):
                (ws / "sub" / f).unlink()
            (ws / "sub").rmdir()
        os.symlink(target, ws / "sub")
        outs = [driver.call("run_experiment", {"description": f"sub -> {target}", "wait_s": 0}),
                driver.call("read_file", {"path": "sub/environ" if target == "/proc/self" else "sub/passwd"}),
                driver.call("list_files", {"path": "sub"})]
        for out in outs:
            assert out.is_error and "symlink" in out.text, out.text
        texts = [o.text for o in outs] + [driver.call(n, {}).text for n in ("get_status", "get_experiments")]
        assert not any(s in t for s in secrets for t in texts)
    wire = call_through_server(driver, [("run_experiment", {"description": "again", "wait_s": 0}),
                                        ("read_file", {"path": "sub/passwd"})])  # the MCP server: the same
    assert all(r.is_error and "symlink" in text(r) and secrets[1] not in text(r) for r in wire)
    assert run.store.evaluations(run.id) == []  # nothing was encoded, nothing ran


def _plant(root: Path, kind: str, name: str) -> str:
    """Plants an attack at ``root/d/name`` (the ``d`` folder itself for a parent link); returns the path read."""
    outside = root.parent / f"outside-{root.name}"
    outside.mkdir(exist_ok=True)
    (outside / name).write_text(json.dumps({"state": SECRET}) if name.endswith(".json") else SECRET + "\n")
    d = root / "d"
    if kind == "parent-link":
        os.symlink(outside, d)
        return f"d/{name}"
    d.mkdir(parents=True, exist_ok=True)
    target = d / name
    if kind == "file-link":
        os.symlink(outside / name, target)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "zero-device":
        if os.geteuid() != 0:
            pytest.skip("making a character device takes root (the harness's real situation)")
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # what /dev/zero is
    else:  # huge: sparse, 8 GiB of apparent size
        with open(target, "wb") as f:
            f.truncate(8 << 30)
    return f"d/{name}"


def _read_with_every_reader(root: Path, rel: str) -> list[str]:
    """What each host-side reader returns (or refuses) for ``rel`` beneath ``root``."""
    from reasearch.agent.tools.experiment_runner import read_experiment_file, read_status
    from reasearch.evaluators.repo import read_repo_dir
    from reasearch.hostfs.guarded_path import UnsafePathError

    out: list[str] = []
    readers: list[Callable[[], object]] = [
        lambda: WorkspaceTools(Workspace(root)).read_file(rel),
        lambda: read_repo_dir(root, listed=[rel]),
        lambda: read_experiment_file(root, rel, None)[0][:4096],
        lambda: read_experiment_file(root, rel, 3)[0][:4096],
        lambda: read_status(root / rel.rsplit("/", 1)[0]),
    ]
    for read in readers:
        try:
            out.append(str(read())[:1 << 20])
        except (ToolError, ConfigError, UnsafePathError) as exc:
            out.append(f"refused: {exc}")
    return out


@pytest.mark.timeout(120)  # the FIFO and /dev/zero cases hung (or filled memory) on the old readers
@pytest.mark.parametrize("kind", ["parent-link", "file-link", "fifo", "zero-device", "huge"])
@pytest.mark.parametrize("name", ["train.log", "status.json", "x.py"])
def test_every_host_side_reader_refuses_links_special_and_huge_files(tmp_path: Path, kind: str, name: str) -> None:
    """The attacker (the agent's bash in the workspace, a training job in its experiment folder) plants,
    where the harness reads: a symlinked parent folder, a symlinked file, a FIFO (blocks an open), a
    ``/dev/zero``-like device (never ends), an 8 GiB sparse file. Every reader -- the ``read_file`` tool,
    the repository encoder, ``read_log`` (tail and offset), the experiment status reader -- returns no host
    byte, returns at all, and returns a bounded answer."""
    root = tmp_path / "root"
    root.mkdir()
    rel = _plant(root, kind, name)
    outs = _read_with_every_reader(root, rel)
    assert not any(SECRET in o for o in outs), outs
    assert all(len(o) <= 3 << 20 for o in outs)
    if kind in ("parent-link", "file-link"):
        assert all("symlink" in o for o in outs[:4]), outs
    if kind in ("fifo", "zero-device"):
        assert "refused" in outs[0] and all("not a regular file" in o for o in outs[2:4]), outs
