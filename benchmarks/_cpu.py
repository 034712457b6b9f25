"""CPU time of a process and its descendants, read from /proc (Linux).

A server's CPU seconds per answered request hardly depend on what else the machine runs,
unlike its requests/s, so benchmarks on a shared machine report both.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["tree_cpu_seconds"]


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds used so far by ``pid`` and every live descendant."""
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # after "pid (comm) ": state ppid ... utime (index 11) stime (index 12)
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = int(fields[11]) + int(fields[12])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(used.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")
