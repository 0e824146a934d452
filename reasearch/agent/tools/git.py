"""The agent's ``git`` tool: version control of a repository candidate, without ever running agent code.

The git directory lives OUTSIDE the workspace (``<run>/git``, beside it), so nothing the agent writes
(files, ``bash`` in the sandbox) can reach ``.git/config`` or ``.git/hooks``. Every call -- the tool's
and the harness's own (``status``/``add``/``ls-files`` each turn and each experiment) -- goes through
:mod:`reasearch.hostfs.host_git`: every key that runs a program pinned (hooks, fsmonitor, pager,
external diff, textconv, credential, ssh, gpg, submodule recursion), no system or global config or
attributes, an empty private ``HOME``, and a refusal before git starts when the workspace holds a
nested ``.git`` (folder or ``gitdir:`` file, any depth), a ``.gitattributes`` naming a filter, diff or
merge driver, or a gitlink in the index: a nested repository's own config is what a recursing git
would run. Only status, diff, log, show, add, commit, checkout, reset,
branch (and rev-parse, ls-files) are allowed; options that read or write files outside the repository
(``--output``, ``-F``, ``--template``, ``--pathspec-from-file``, ...) or change where git looks
(``--git-dir``, ``-c``) are refused. Remotes, push, fetch, config and hooks are refused.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from reasearch.agent.tools.schema import ToolError, tool
from reasearch.errors import ConfigError
from reasearch.hostfs.host_git import check_work_tree, git_argv, git_env, gitlinks

__all__ = ["ALLOWED_COMMANDS", "GitRepo", "GitTools", "check_git_args"]

ALLOWED_COMMANDS = ("status", "diff", "log", "show", "add", "commit", "checkout", "reset", "branch", "rev-parse",
                    "ls-files", "restore")
# Long options allowed (prefix before '='). Git accepts unambiguous abbreviations, so a deny-list could be
# bypassed (--templ for --template): only these exact spellings pass.
_LONG_OK = {
    "--stat", "--shortstat", "--numstat", "--name-only", "--name-status", "--oneline", "--graph", "--all",
    "--cached", "--staged", "--short", "--porcelain", "--branch", "--hard", "--soft", "--mixed", "--keep",
    "--amend", "--no-edit", "--message", "--format", "--pretty", "--max-count", "--decorate", "--abbrev-commit",
    "--unified", "--word-diff", "--color", "--no-color", "--list", "--delete", "--move", "--force", "--quiet",
    "--verbose", "--summary", "--follow", "--reverse", "--since", "--until", "--author", "--grep", "--no-renames",
    "--patch", "--no-patch", "--allow-empty", "--untracked-files", "--show-current", "--abbrev-ref", "--verify",
    "--short-ref", "--others", "--exclude-standard", "--modified", "--deleted", "--source", "--worktree",
    "--update", "--intent-to-add", "--dry-run", "--ignore-space-change", "--ignore-all-space", "--minimal",
    "--first-parent", "--no-merges", "--date", "--relative-date", "--contains", "--merged", "--no-merged",
    "--sort", "--detach", "--orphan",
}
_SHORT_BAD = set("FtOoXc")  # -F/-t read a file (commit), -O an order file, -o/-X/-c vary; refused everywhere


def check_git_args(args: list[str]) -> list[str]:
    """``args`` when they are an allowed git command line (without the leading ``git``); ToolError otherwise."""
    if not args:
        raise ToolError(f"give a git command, e.g. 'status' or 'commit -m \"raise lr\"'; allowed: "
                        f"{', '.join(ALLOWED_COMMANDS)}")
    cmd = args[0]
    if cmd not in ALLOWED_COMMANDS:
        why = ("remotes are not available: experiments stay on this machine"
               if cmd in ("push", "pull", "fetch", "remote", "clone", "submodule") else
               "configuration and hooks are fixed by the harness" if cmd in ("config", "hook") else "not allowed")
        raise ToolError(f"refused: git {cmd}: {why}. Allowed: {', '.join(ALLOWED_COMMANDS)}")
    paths = False
    for a in args[1:]:
        if paths or not a.startswith("-") or a == "-":
            continue
        if a == "--":
            paths = True
            continue
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name not in _LONG_OK:
                raise ToolError(f"refused: git option {name} is not allowed here")
        else:
            flags = a[1:]
            if cmd in ("log", "show", "diff") and flags.isdigit():  # -5: the last five commits
                continue
            if cmd in ("commit",) and flags.startswith("m"):
                continue  # -m"message": the rest is the message
            bad = set(flags.split("=", 1)[0]) & _SHORT_BAD
            if bad:
                raise ToolError(f"refused: git option -{''.join(sorted(bad))} is not allowed here")
    return args


class GitRepo:
    """A repository whose git directory is kept outside its work tree.

    Args:
        work_tree: the folder of the files (the agent's workspace).
        git_dir: where git keeps its objects and config (default: ``<work_tree>/../git``).
        home: the empty HOME git runs with, so no ~/.gitconfig is read (default: ``git-home`` beside
            ``git_dir``; a caller whose git directory lies inside the work tree passes a folder elsewhere).
    """

    def __init__(self, work_tree: str | Path, git_dir: str | Path | None = None,
                 home: str | Path | None = None) -> None:
        self.work_tree = Path(work_tree).resolve()
        self.git_dir = Path(git_dir).resolve() if git_dir is not None else self.work_tree.parent / "git"
        self._home = Path(home) if home is not None else self.git_dir.parent / "git-home"

    def _env(self) -> dict[str, str]:
        return git_env(home=self._home, git_dir=self.git_dir, work_tree=self.work_tree)

    def _git(self, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(git_argv(args), cwd=self.work_tree, env=self._env(), capture_output=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"git {args[0]} timed out after {timeout_s:g} s") from None

    def check(self) -> None:
        """Raises ConfigError when the work tree or the index holds what could make git run a program: a
        nested ``.git`` anywhere, a ``.gitattributes`` naming a driver, a gitlink (submodule) entry."""
        check_work_tree(self.work_tree, own_git_dir=self.git_dir)
        if (self.git_dir / "HEAD").is_file():
            links = gitlinks(self._git(["ls-files", "-s", "-z"], 60.0))
            if links:
                raise ConfigError(f"the index holds a submodule (gitlink) at {links[0]}; the harness's git takes "
                                  f"none: drop it with git reset -- {links[0]} (and remove {links[0]} from the "
                                  "last commit if it is there: git reset HEAD~1)")

    def run(self, args: list[str], *, timeout_s: float = 60.0, check: bool = True) -> str:
        """Runs ``git ARGS`` safely; returns stdout+stderr. Raises ConfigError on failure when ``check``, and
        always when the work tree holds a nested repository, a driver attribute or a gitlink (:meth:`check`;
        ``reset`` alone still runs beside a gitlink, to drop it)."""
        if args and args[0] == "reset":
            check_work_tree(self.work_tree, own_git_dir=self.git_dir)
        elif not (args and args[0] == "init"):
            self.check()
        cp = self._git(args, timeout_s)
        out = (cp.stdout + cp.stderr).decode("utf-8", errors="replace")
        if check and cp.returncode != 0:
            raise ConfigError(f"git {' '.join(args[:2])} failed (exit {cp.returncode}): {out.strip()[-2000:]}")
        return out

    def init(self) -> None:
        """Creates the repository (idempotent)."""
        if (self.git_dir / "HEAD").is_file():
            return
        self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        self.run(["init", "-q"])

    def head(self) -> str | None:
        """The HEAD commit, or None before the first commit."""
        out = self.run(["rev-parse", "--verify", "-q", "HEAD"], check=False).strip()
        return out if len(out) == 40 else None

    def dirty(self) -> bool:
        return bool(self.run(["status", "--porcelain"]).strip())

    def listed_files(self) -> list[str]:
        """Tracked and untracked-but-not-ignored files of the work tree."""
        out = self.run(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        return sorted({p for p in out.split("\0") if p.strip()})


class GitTools:
    """The ``git`` tool over one :class:`GitRepo` (the workspace's)."""

    def __init__(self, repo: GitRepo, *, max_output: int = 12_000) -> None:
        self.repo = repo
        self.max_output = max_output

    @tool
    def git(self, command: str) -> str:
        """Runs a git command on the workspace repository (status, diff, log, show, add, commit, checkout,
        reset, branch). Hooks, config, remotes, push and fetch are not available.

        Args:
            command: the arguments after 'git', e.g. 'log --oneline -5', 'commit -am "lr 3e-3"' or 'checkout abc123 \
-- train.py'.
        """
        try:
            args = shlex.split(command)
        except ValueError as exc:
            raise ToolError(f"cannot parse the command: {exc}") from None
        if args and args[0] == "git":
            args = args[1:]
        check_git_args(args)
        try:
            out = self.repo.run(args)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
        if len(out) > self.max_output:
            out = out[: self.max_output] + f"\n[... {len(out) - self.max_output} characters cut]"
        return out.strip() or f"(git {args[0]}: no output)"
