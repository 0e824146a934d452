"""Every test session is a new machine (issue 37 item 1): the suite never runs under the developer's
evaluator secret, whether it is in ``$REASEARCH_SECRET`` or in the secret file of their data home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reasearch.evaluators._secret import fingerprint

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
def test_print_fingerprint():
    from reasearch.evaluators._secret import fingerprint, secret_path
    print("FINGERPRINT", fingerprint(), secret_path())
'''


def test_each_session_makes_its_own_secret_and_never_uses_the_developers(tmp_path: Path) -> None:
    dev_home = tmp_path / "dev-data-home"
    dev_key = b"d" * 32
    (dev_home / "reasearch").mkdir(parents=True, mode=0o700)
    (dev_home / "reasearch" / "secret").write_bytes(dev_key)
    os.chmod(dev_home / "reasearch" / "secret", 0o600)
    env_secret = "the-developers-own-secret-0123456789"
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "XDG_DATA_HOME": str(dev_home), "REASEARCH_SECRET": env_secret, "PYTHONPATH": str(REPO)}
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tests.conftest",
                         "--rootdir", str(tmp_path), str(probe)],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    line = next(x for x in cp.stdout.splitlines() if "FINGERPRINT" in x)
    _, inner, path = line.split()[-3:]
    assert not path.startswith(str(dev_home)), path
    assert not Path(path).exists()  # the session's data home is removed when it ends
    assert inner not in {fingerprint(dev_key), fingerprint(env_secret.encode())}
    assert inner != fingerprint()  # this session and that one: two sessions, two machines
