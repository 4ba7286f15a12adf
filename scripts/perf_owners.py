#!/usr/bin/env python3
"""Whose code a process's CPU went to, from `perf script` output on stdin.

Each sample is given to the innermost frame of a known owner (this crate,
Cedar, rmcp, tokio, SQLite, std): what serde, libc or the kernel do for a
caller counts as that caller's. `--within SYMBOL` keeps only the samples
with a frame containing SYMBOL (e.g. `Gateway::decide`).

    perf record -F 3000 --call-graph dwarf,32768 -p PID -o perf.data -- sleep 15
    perf script -i perf.data -F comm,tid,time,ip,sym | scripts/perf_owners.py [--within SYMBOL]

See docs/performance.md, "Where the proxy's CPU goes".
"""

import collections
import re
import sys

OWNERS = [
    ("intentplane", ("intentplane::",)),
    ("cedar", ("cedar_policy",)),
    ("rmcp (MCP)", ("rmcp::",)),
    ("sqlite", ("rusqlite::", "sqlite3")),
    ("tokio", ("tokio::",)),
    ("std", ("std::",)),
]


def samples(lines):
    """Each sample's frames, innermost first."""
    cur = None
    for line in lines:
        if not line.strip():
            if cur is not None:
                yield cur
            cur = None
        elif not line[0].isspace():
            cur = []
        elif cur is not None:
            parts = line.strip().split(None, 1)
            cur.append(re.sub(r"\+0x[0-9a-f]+$", "", parts[1] if len(parts) > 1 else "?"))
    if cur is not None:
        yield cur


def owner(frames):
    for f in frames:
        for name, pats in OWNERS:
            if any(p in f for p in pats):
                return name
    return "other (no frame of a known owner)"


def main(argv):
    within = None
    if len(argv) == 2 and argv[0] == "--within":
        within = argv[1]
    elif argv:
        sys.exit("usage: perf script -F comm,tid,time,ip,sym | scripts/perf_owners.py [--within SYMBOL]")
    counts = collections.Counter()
    for s in samples(sys.stdin):
        if within is None or any(within in f for f in s):
            counts[owner(s)] += 1
    total = sum(counts.values())
    if total == 0:
        sys.exit("error: no samples" + (f" with a frame `{within}`" if within else "") + " on stdin")
    print(f"{total} samples" + (f" within `{within}`" if within else ""))
    for name, c in counts.most_common():
        print(f"{100 * c / total:5.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
