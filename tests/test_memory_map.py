"""The bench's memory map: RSS grouped by mapping from ``/proc/PID/smaps``, and what grew between two readings."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tools.memory_map import MemoryMap, growth_lines, mapping_name, read_map, rss_by_mapping, rss_kinds

REPO = Path(__file__).resolve().parents[1]
SMAPS = """\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
Rss:                 100 kB
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                 512 kB
7f1000000000-7f1000200000 r-xp 00000000 08:01 1234                       /usr/lib/x86_64-linux-gnu/libcublasLt.so.12
Size:               2048 kB
Rss:                 300 kB
7f2000000000-7f2000001000 rw-p 00000000 08:01 99                         /tmp/gone.bin (deleted)
Rss:                   4 kB
7f3000000000-7f3000100000 rw-p 00000000 00:00 0
Rss:                  16 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  24 kB
"""


def test_rss_is_grouped_by_heap_anonymous_and_each_file() -> None:
    totals = rss_by_mapping(SMAPS)
    assert totals == Counter({"[heap]": 100 * 1024, "[anon]": 528 * 1024, "libcublasLt.so.12": 300 * 1024,
                              "gone.bin": 4 * 1024, "[stack]": 24 * 1024})  # fmt: skip
    assert mapping_name("7f-8f r-xp 0 0:0 0   [stack:123]") == "[stack]"


def test_the_kernels_split_of_rss_is_read_from_status() -> None:
    status = (
        "Name:\tpython\nVmRSS:\t    2048 kB\nRssAnon:\t     512 kB\nRssFile:\t    1536 kB\nRssShmem:\t       0 kB\n"
    )
    assert rss_kinds(status) == Counter({"VmRSS": 2 * 2**20, "RssAnon": 2**19, "RssFile": 1536 * 1024})


def test_growth_lists_the_largest_changes_per_call_then_malloc_and_threads() -> None:
    before = MemoryMap(Counter({"[anon]": 10 * 2**20, "libx.so": 2**20}), 5 * 2**20, 7)
    after = MemoryMap(Counter({"[anon]": 30 * 2**20, "libx.so": 2**20, "liby.so": 2**20}), 6 * 2**20, 9)
    lines = growth_lines(before, after, calls=10)
    assert lines == [
        "   [anon]: +20.0 MiB (+2.000 per call)",
        "   liby.so: +1.0 MiB (+0.100 per call)",
        "   glibc in use: +1.0 MiB (+0.100 per call)",
        "   threads: 7 -> 9",
    ]


def pages_and_block_show() -> None:
    """New anonymous pages show in the mapped RSS, and a malloc'd block in glibc's bytes in use (it may come from
    free heap that is already resident, as after the Piper backend's mallopt: so the pages are mapped apart)."""
    import mmap

    before = read_map()
    pages = mmap.mmap(-1, 64 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages.write(b"\x01" * len(pages))  # touch every page
    block = bytearray(32 * 2**20)
    after = read_map()
    grown = sum(after.by_mapping.values()) - sum(before.by_mapping.values())
    assert grown > 60 * 2**20, grown
    assert after.threads >= 1 and after.malloc_in_use is not None and before.malloc_in_use is not None
    assert after.malloc_in_use - before.malloc_in_use >= len(block)
    assert after.kinds["RssAnon"] - before.kinds["RssAnon"] > 60 * 2**20
    kinds_line = [line for line in growth_lines(before, after, 1) if "VmRSS" in line]
    assert len(kinds_line) == 1 and "the mappings' sum +" in kinds_line[0]
    pages.close()


def test_a_process_reading_sees_new_pages_and_new_malloc_bytes() -> None:
    """In a fresh process of one thread: in a test runner's, other modules' threads free heap between the two
    readings, and glibc's in-use bytes then grew by less than the block."""
    check = "from tests.test_memory_map import pages_and_block_show; pages_and_block_show()"
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
