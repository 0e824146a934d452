"""The whole-machine profile's arithmetic (``reasearch._bench.kernel_profile``) on synthetic ``perf script``
output: samples parsed, each put in a role and a kind of work, counted into CPU ms per evaluation."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from reasearch._bench import kernel_profile as kp

K = "[kernel.kallsyms]"

# Three samples as ``perf script -F comm,tid,ip,sym,dso`` prints them (a thread name may have a space; each
# header line ends in a space, written \x20 here).
PERF_SCRIPT = """\
python3.11 4242\x20
\tffffffff8123 unmap_page_range+0x1f ([kernel.kallsyms])
\tffffffff8124 exit_mmap ([kernel.kallsyms])
\tffffffff8125 do_exit ([kernel.kallsyms])
\tffffffff8126 __x64_sys_exit_group ([kernel.kallsyms])

rs-engine 17\x20
\t7f00001 _PyEval_EvalFrameDefault+0x10 (/usr/lib/libpython3.11.so.1.0)
\t7f00002 main (/usr/bin/python3.11)

Web Content 99\x20
\tffffffff8127 do_wp_page ([kernel.kallsyms])
\tffffffff8128 handle_mm_fault ([kernel.kallsyms])
\tffffffff8129 exc_page_fault ([kernel.kallsyms])
"""


def test_samples_are_parsed_leaf_first_with_their_thread_name() -> None:
    samples = list(kp.parse_samples(PERF_SCRIPT.splitlines()))
    assert [comm for comm, _ in samples] == ["python3.11", "rs-engine", "Web Content"]
    assert samples[0][1][:2] == [("unmap_page_range", K), ("exit_mmap", K)]  # offsets dropped
    assert samples[1][1][0] == ("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.11.so.1.0")
    # The last sample counts without a blank line after it.
    assert len(samples[2][1]) == 3


@pytest.mark.parametrize(("chain", "kind"), [
    (["unmap_page_range", "exit_mmap", "do_exit"], "exit: address space torn down"),
    (["free_pgtables", "do_exit"], "exit: the rest"),
    (["copy_page_range", "dup_mmap", "copy_process"], "fork: address space copied"),
    (["alloc_pid", "copy_process"], "fork: the rest"),
    (["copy_mc_enhanced_fast_string", "wp_page_copy", "do_wp_page", "exc_page_fault"], "page fault: copy-on-write"),
    (["next_uptodate_folio", "filemap_map_pages", "do_read_fault", "exc_page_fault"], "page fault: file-backed"),
    (["clear_page_erms", "do_anonymous_page", "exc_page_fault"], "page fault: new anonymous page"),
    (["lock_vma_under_rcu", "exc_page_fault"], "page fault: entry and the rest"),
    (["finish_task_switch.isra.0", "__schedule", "schedule", "__x64_sys_poll"], "scheduler"),
    (["pipe_write", "vfs_write", "__x64_sys_write"], "system call: write"),
    (["memcpy_orig", "__do_sys_pipe2"], "system call: pipe2"),
    (["irq_exit_rcu"], "kernel: the rest"),
])
def test_a_kernel_chain_is_named_by_its_first_known_frame(chain: list[str], kind: str) -> None:
    assert kp.classify([(sym, K) for sym in chain]) == kind


def test_a_chain_whose_leaf_is_not_the_kernel_is_user_space() -> None:
    # A user-space leaf counts as user space even if a kernel frame follows (it cannot, but never guess).
    assert kp.classify([("PyObject_Malloc", "/lib/libpython3.11.so"), ("exit_mmap", K)]) == kp.USER
    assert kp.classify([]) == kp.USER


def test_roles_come_from_the_thread_name() -> None:
    jail = frozenset({"nsjail", "python3.11"})
    assert kp.role("rs-engine", "rs-engine", jail) == kp.ENGINE
    assert kp.role("python3.11", "rs-engine", jail) == kp.JAIL
    assert kp.role("swapper", "rs-engine", jail) == kp.role("swapper/1", "rs-engine", jail) == kp.IDLE
    assert kp.role("python", "rs-engine", jail) == kp.OTHER  # a process of the same language is not ours


def test_tally_and_table_give_cpu_per_evaluation() -> None:
    counts = kp.tally(kp.parse_samples(PERF_SCRIPT.splitlines()), "rs-engine", frozenset({"python3.11"}))
    assert counts == Counter({(kp.JAIL, "exit: address space torn down"): 1, (kp.ENGINE, kp.USER): 1,
                              (kp.OTHER, "page fault: copy-on-write"): 1})
    # 1000 Hz: a sample is 1 ms of one CPU; 4 evaluations.
    many = Counter({(kp.JAIL, "fork: address space copied"): 60, (kp.JAIL, kp.USER): 38, (kp.JAIL, "scheduler"): 2,
                    (kp.IDLE, "idle"): 100})
    rows = kp.table(many, 1000.0, 4, min_share=0.02)
    assert rows[0][0] == rows[1][0] == kp.JAIL  # the larger role first, in order of its kinds
    jail_rows = {kind: (share, ms) for who, kind, share, ms in rows if who == kp.JAIL}
    assert math.isclose(jail_rows["fork: address space copied"][1], 15.0)  # 60 ms over 4 evaluations
    assert math.isclose(jail_rows["fork: address space copied"][0], 0.3)
    assert math.isclose(jail_rows["the rest"][1], 0.5)  # the scheduler's 2 samples, under 2% of all
    assert "scheduler" not in jail_rows
    assert math.isclose(jail_rows["total"][1], 25.0)
    assert [kind for who, kind, _, _ in rows if who == kp.IDLE] == ["idle", "total"]
    assert kp.table(Counter(), 1000.0, 4) == []
    with pytest.raises(ValueError, match="positive"):
        kp.table(many, 1000.0, 0)
