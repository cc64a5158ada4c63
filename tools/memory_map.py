"""Where a process's resident memory lies: RSS per mapping (heap, anonymous, each library) and glibc's own count.

The host-memory benches print RSS growth; this says what grew. Anonymous growth with glibc's in-use bytes
flat is memory malloc does not know of (a driver's own mappings); in-use bytes growing is a native leak or a
cache; a library's file-backed pages growing is its code or data being paged in on first use, which is
bounded by the file's size and shared with every process that maps it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from voicelab.engine.heap import malloc_in_use

MIB = 2**20


@dataclass(frozen=True)
class MemoryMap:
    """One reading: RSS bytes by mapping name, glibc's bytes in use (heap + mmapped chunks), native threads."""

    by_mapping: Counter[str] = field(default_factory=Counter)
    malloc_in_use: int | None = None
    threads: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # the kernel's own split: VmRSS, RssAnon, RssFile, RssShmem


STATUS_KINDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def rss_kinds(status: str) -> Counter[str]:
    """VmRSS and its anonymous / file-backed / shared parts, in bytes, from a ``/proc/PID/status`` text. A page
    the kernel counts here but no smaps mapping shows (driver memory) makes VmRSS and the mappings' sum differ."""
    kinds: Counter[str] = Counter()
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in STATUS_KINDS and value.split():
            kinds[name] = int(value.split()[0]) * 1024
    return kinds


def mapping_name(header: str) -> str:
    """The group a ``/proc/PID/smaps`` header line's mapping belongs to: its file's name, or ``[anon]``."""
    parts = header.split(maxsplit=5)
    if len(parts) < 6:
        return "[anon]"
    path = parts[5].strip()
    if path.startswith("["):
        return "[stack]" if path.startswith("[stack") else path
    return Path(path.removesuffix(" (deleted)")).name or path


def rss_by_mapping(smaps: str) -> Counter[str]:
    """RSS bytes per mapping group in the text of a ``/proc/PID/smaps`` file."""
    totals: Counter[str] = Counter()
    name = "[anon]"
    for line in smaps.splitlines():
        head = line.split(maxsplit=1)[0] if line.strip() else ""
        if "-" in head and not head.endswith(":"):
            name = mapping_name(line)
        elif head == "Rss:":
            totals[name] += int(line.split()[1]) * 1024
    return totals


def read_map() -> MemoryMap:
    """This process's memory map now; an empty map where ``/proc`` has no smaps."""
    proc = Path("/proc/self")
    try:
        smaps, status = (proc / "smaps").read_text(), (proc / "status").read_text()
    except OSError:
        return MemoryMap()
    threads = len(os.listdir(proc / "task"))
    return MemoryMap(rss_by_mapping(smaps), malloc_in_use(), threads, rss_kinds(status))


def growth_lines(before: MemoryMap, after: MemoryMap, calls: int, top: int = 6) -> list[str]:
    """The mappings whose RSS grew most between two readings, then glibc's in-use bytes and the thread count."""
    diff = Counter(after.by_mapping)
    diff.subtract(before.by_mapping)
    lines = [
        f"   {name}: {delta / MIB:+.1f} MiB ({delta / MIB / max(calls, 1):+.3f} per call)"
        for name, delta in sorted(diff.items(), key=lambda item: -abs(item[1]))[:top]
        if delta
    ]
    if before.malloc_in_use is not None and after.malloc_in_use is not None:
        grown = (after.malloc_in_use - before.malloc_in_use) / MIB
        lines.append(f"   glibc in use: {grown:+.1f} MiB ({grown / max(calls, 1):+.3f} per call)")
    if before.kinds and after.kinds:
        by_kind = {name: (after.kinds[name] - before.kinds[name]) / MIB for name in STATUS_KINDS}
        mapped = (sum(after.by_mapping.values()) - sum(before.by_mapping.values())) / MIB
        lines.append("   " + ", ".join(f"{name} {delta:+.1f}" for name, delta in by_kind.items())
                     + f" MiB; the mappings' sum {mapped:+.1f} MiB")  # fmt: skip
    lines.append(f"   threads: {before.threads} -> {after.threads}")
    return lines
