"""Host-side access to folders that untrusted code writes: the guarded reader and host-side git.

The agent's workspace, a repository candidate's folder and an experiment's folder are written by a model
or by jailed code, while the harness that reads them (and runs git over them) is the driver. Every such
read goes through :class:`~reasearch.hostfs.guarded_path.Root`; every such git call through
:mod:`reasearch.hostfs.host_git`. Its own package so that the evaluators (the repository reader) and the
agent (its workspace tools) use one copy; it imports only :mod:`reasearch.errors`, and it stays out of
the jail's code copy (the engine never imports it).
"""

from __future__ import annotations

from reasearch.hostfs.guarded_path import Entry, Root, UnsafePathError, Usage
from reasearch.hostfs.host_git import PINNED_CONFIG, check_work_tree, git_argv, git_env, gitlinks

__all__ = ["Entry", "Root", "UnsafePathError", "Usage", "PINNED_CONFIG", "check_work_tree", "git_argv", "git_env",
           "gitlinks"]
