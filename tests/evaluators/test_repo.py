"""Repository candidates: the canonical manifest and the boundary of reading and writing repositories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reasearch.errors import ConfigError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.repo import MAX_FILES, decode_repo, encode_repo, read_repo_dir, write_repo


def test_the_manifest_is_canonical_whatever_the_order() -> None:
    a = encode_repo({"train.py": "x = 1\n", "lib/util.py": "y = 2\n"})
    b = encode_repo({"lib/util.py": "y = 2\n", "train.py": "x = 1\n"})
    assert a == b and candidate_sha256(a) == candidate_sha256(b)
    assert candidate_sha256(encode_repo({"train.py": "x = 2\n", "lib/util.py": "y = 2\n"})) != candidate_sha256(a)
    assert decode_repo(a).files == {"lib/util.py": "y = 2\n", "train.py": "x = 1\n"}


def test_a_plain_source_is_a_one_file_repository() -> None:
    assert decode_repo("print('hi')\n").files == {"train.py": "print('hi')\n"}
    assert decode_repo("{1: 2}\n").files == {"train.py": "{1: 2}\n"}  # a dict literal, not a manifest
    assert decode_repo('{"a": 1}').files == {"train.py": '{"a": 1}'}  # JSON without "format": a source too


@pytest.mark.parametrize("path", ["../x.py", "/etc/passwd", "a/../../x", ".git/config", "a//b", "a/./b", "",
                                  "sp ace.py", "x\\y.py", "__pycache__/m.pyc", "a/.git/hooks/pre-commit"])
def test_bad_paths_are_refused(path: str) -> None:
    with pytest.raises(ConfigError, match="bad repository path"):
        encode_repo({path: "x"})
    with pytest.raises(ConfigError):
        decode_repo(json.dumps({"format": "reasearch-repo/1", "files": {path: "x"}}))


def test_malformed_manifests_are_refused() -> None:
    for doc, words in [({"format": "reasearch-repo/1", "files": {"a.py": 3}}, "must be text"),
                       ({"format": "reasearch-repo/1", "files": [], "extra": 1}, "unknown keys"),
                       ({"format": "reasearch-repo/1", "files": {"a": "x", "a/b.py": "y"}}, "both a file and a folder"),
                       ({"format": "reasearch-repo/1", "files": {}, "time_budget_s": -1}, "positive"),
                       ({"format": "reasearch-repo/1", "files": {}, "time_budget_s": True}, "positive"),
                       ({"format": "reasearch-repo/1", "files": {f"f{i}.py": "" for i in range(MAX_FILES + 1)}},
                        "at most")]:
        with pytest.raises(ConfigError, match=words):
            decode_repo(json.dumps(doc))
    with pytest.raises(ConfigError, match="at most"):
        encode_repo({"big.py": "x" * (5 << 20)})


def test_reading_a_folder_refuses_symlinks_and_binary_files(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0\1")
    assert read_repo_dir(tmp_path) == {"train.py": "x = 1\n"}
    (tmp_path / "secret.txt").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError, match="symlink"):
        read_repo_dir(tmp_path)
    os.unlink(tmp_path / "secret.txt")
    (tmp_path / "lib").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(ConfigError, match="symlink"):
        read_repo_dir(tmp_path)
    os.unlink(tmp_path / "lib")
    (tmp_path / "weights.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_repo_dir(tmp_path)
    assert read_repo_dir(tmp_path, listed=["train.py"]) == {"train.py": "x = 1\n"}
    with pytest.raises(ConfigError, match="symlink"):
        (tmp_path / "s").symlink_to("/etc/passwd")
        read_repo_dir(tmp_path, listed=["s"])


def test_a_git_repository_is_read_as_git_sees_it(tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("out/\n*.pt\n")
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "huge.txt").write_text("ignored\n")
    (tmp_path / "model.pt").write_bytes(b"\x80\x04binary")
    assert read_repo_dir(tmp_path) == {".gitignore": "out/\n*.pt\n", "train.py": "x = 1\n"}


def test_writing_refuses_a_non_empty_folder_and_never_follows_links(tmp_path: Path) -> None:
    dest = write_repo({"a/b.py": "x\n", "train.py": "y\n"}, tmp_path / "repo")
    assert (dest / "a" / "b.py").read_text() == "x\n"
    with pytest.raises(ConfigError, match="not empty"):
        write_repo({"train.py": "z\n"}, dest)
