"""ConnectionBalance: shed a connection only when clearly crowded, never for a dead sibling."""

from __future__ import annotations

import os
import subprocess
import sys

from servinglib.serve.balance import ConnectionBalance


def _sibling(balance: ConnectionBalance, slot: int, pid: int, connections: int) -> None:
    table = balance._table  # the shared table, as another worker would write it
    table[2 * slot], table[2 * slot + 1] = pid, connections


def test_sheds_only_when_clearly_above_the_least_busy_worker() -> None:
    balance = ConnectionBalance(slots=4)
    balance.join()
    sibling = os.getppid()  # a live process standing in for the other worker
    _sibling(balance, 1, sibling, 4)
    for _ in range(5):
        balance.opened()
    assert not balance.crowded()  # 5 against 4: balanced enough
    balance.opened()
    assert balance.crowded()  # 6 against 4
    for _ in range(2):
        balance.closed()
    assert not balance.crowded()
    balance.leave()
    assert not balance.crowded()  # not taking part any more


def test_a_killed_sibling_frees_its_slot_instead_of_draining_the_living() -> None:
    balance = ConnectionBalance(slots=4)
    balance.join()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _sibling(balance, 1, gone.pid, 0)
    for _ in range(8):
        balance.opened()
    assert not balance.crowded()
    assert balance._table[2] == 0  # reclaimed
    assert not balance.crowded()  # nobody else is serving: nothing to shed
