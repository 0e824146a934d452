"""Host-side git over a folder that untrusted code writes: nothing the folder holds is ever executed.

Trust boundary: the work tree (the agent's workspace, a repository candidate's folder) is written by a
model and by jailed commands, while git runs on the host, as root in the usual deployment. git runs
programs named by configuration (filters, hooks, fsmonitor, pager, external diff, textconv, merge
drivers, credential helpers, ssh, gpg) and, for a nested repository or a gitlink, starts itself again
inside it, where *that* repository's own config applies. So every git call here:

* reads no configuration the work tree can write: no system or global file (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``, an empty private ``HOME``), no system attributes
  (``GIT_ATTR_NOSYSTEM``, ``core.attributesFile=/dev/null``), and the git directory is the harness's
  (outside the work tree, or a fresh one this module builds);
* pins every key that runs a program (:data:`PINNED_CONFIG`), and never recurses into submodules;
* is preceded by :func:`check_work_tree`, which refuses a ``.git`` (folder, file or symlink) anywhere
  in the work tree, and a ``.gitattributes`` that names a filter, diff or merge driver (a driver needs
  configuration to run, which the work tree cannot give; refusing it is the second layer).

Gitlinks in the index are found by :func:`gitlinks` (the caller refuses them). The work tree is
walked with :class:`~reasearch.hostfs.guarded_path.Root` (no symlink followed).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

from reasearch.errors import ConfigError
from reasearch.hostfs.guarded_path import Root, UnsafePathError

__all__ = ["PINNED_CONFIG", "check_work_tree", "git_argv", "git_env", "gitlinks"]

# Every configuration key that makes git run a program (or reach out), pinned off on the command line,
# which outranks the repository's config. Filters and diff/merge drivers are per driver name and cannot
# all be pinned: the config that could define one is never the work tree's, and .gitattributes naming
# one is refused (check_work_tree).
PINNED_CONFIG: tuple[str, ...] = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false", "core.pager=cat",
    "core.editor=true", "core.askPass=true", "core.sshCommand=false", "core.gitProxy=false",
    "core.attributesFile=/dev/null", "core.excludesFile=/dev/null", "core.symlinks=true",
    "diff.external=", "diff.ignoreSubmodules=all", "status.submoduleSummary=false", "submodule.recurse=false",
    "fetch.recurseSubmodules=false", "push.recurseSubmodules=no", "credential.helper=", "sequence.editor=true",
    "commit.gpgSign=false", "tag.gpgSign=false", "gpg.program=false", "gpg.ssh.program=false",
    "gpg.x509.program=false", "protocol.allow=never", "uploadpack.packObjectsHook=", "init.templateDir=",
    "init.defaultBranch=main", "advice.addEmbeddedRepo=false",
)
# Commands whose output may go through a textconv or external diff: both are switched off explicitly.
_DIFFING = ("diff", "show", "log")
# A .gitattributes line that sets a filter, a diff or merge driver, or defines a macro (which could).
_DRIVER_ATTR = re.compile(r"(?:^|\s)(?:filter(?:=|\s|$)|diff=|merge=|\[attr\])")


def git_env(*, home: Path, git_dir: Path, work_tree: Path) -> dict[str, str]:
    """The whole environment of a host-side git call (nothing inherited but ``PATH``)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": str(work_tree.parent), "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat",
            "PAGER": "cat", "GIT_EDITOR": "true", "GIT_ASKPASS": "true", "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work_tree), "LANG": "C.UTF-8",
            "GIT_AUTHOR_NAME": "reasearch agent", "GIT_AUTHOR_EMAIL": "agent@reasearch.invalid",
            "GIT_COMMITTER_NAME": "reasearch agent", "GIT_COMMITTER_EMAIL": "agent@reasearch.invalid"}


def git_argv(args: list[str]) -> list[str]:
    """``git`` with every program-running key pinned, then ``args`` (diffs without textconv or external diff,
    status and diffs ignoring submodules)."""
    cmd = ["git", "--no-pager"]
    for kv in PINNED_CONFIG:
        cmd += ["-c", kv]
    if not args:
        return cmd
    extra: list[str] = []
    if args[0] in _DIFFING:
        extra = ["--no-ext-diff", "--no-textconv", "--ignore-submodules=all"]
    elif args[0] == "status":
        extra = ["--ignore-submodules=all"]
    return [*cmd, args[0], *extra, *args[1:]]


def check_work_tree(root: Path, *, own_git_dir: Path | None = None) -> None:
    """Raises ConfigError when the work tree holds what would make git run something: a ``.git`` (folder,
    file or symlink) at any depth, or a ``.gitattributes`` naming a filter, diff or merge driver.

    Args:
        root: the work tree.
        own_git_dir: the harness's git directory when it is ``root/.git`` (a folder written by the harness).
    """
    fs = Root(root)
    try:
        own = own_git_dir is not None and Path(own_git_dir).resolve() == Path(fs.path) / ".git"
        pruned: tuple[str, ...] = ()
        for e in fs.walk():
            if pruned and e.rel.startswith(pruned):
                continue
            name = e.rel.rsplit("/", 1)[-1]
            if name == ".git":
                if own and e.rel == ".git" and e.is_dir:
                    pruned = (*pruned, ".git/")
                    continue
                kind = "folder" if e.is_dir else "symlink" if stat.S_ISLNK(e.st.st_mode) else "file"
                raise ConfigError(f"{e.rel} is a nested git repository ({kind}); the harness's git never works in "
                                  f"one: remove it (rm -rf {e.rel}) -- submodules and nested repositories are "
                                  "not allowed in the workspace")
            if name == ".gitattributes" and stat.S_ISREG(e.st.st_mode):
                try:
                    text = fs.read_bytes(e.rel, cap=256 << 10).decode("utf-8", "replace")
                except (UnsafePathError, FileNotFoundError) as exc:
                    raise ConfigError(f"{e.rel} cannot be checked: {exc}; remove it") from None
                for line in text.splitlines():
                    if not line.lstrip().startswith("#") and _DRIVER_ATTR.search(line):
                        raise ConfigError(f"{e.rel} sets a filter, diff or merge driver ({line.strip()[:80]!r}); "
                                          "the harness's git runs no driver: remove that line")
    except UnsafePathError as exc:
        raise ConfigError(f"the work tree cannot be checked: {exc}") from None
    finally:
        fs.close()


def gitlinks(run: subprocess.CompletedProcess[bytes]) -> list[str]:
    """The paths of gitlink (mode 160000, submodule) entries in the output of ``git ls-files -s -z``."""
    out = []
    for rec in run.stdout.split(b"\0"):
        if rec.startswith(b"160000 "):
            out.append(rec.split(b"\t", 1)[-1].decode("utf-8", "replace"))
    return out
