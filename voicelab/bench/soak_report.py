"""The soak's figures and its verdicts: per-window tables, first vs last window, pass/fail lines.

Host memory is judged on the worker's RSS at each window's end (after the job's between-job hygiene);
the first window is the warm-up, so "growth after warm-up" is the highest later window minus the first.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

MiB = 2**20


@dataclass(frozen=True)
class Window:
    """Figures for one window of requests; memory is read at the window's end."""

    end: int
    p50_s: float
    p95_s: float
    allocated: int
    reserved: int
    fragmentation: float
    nvml_used: int | None
    rss: int

    def progress(self) -> str:
        return (
            f"p50 {self.p50_s:.3f}s  p95 {self.p95_s:.3f}s  alloc {_mib(self.allocated)} MiB  "
            f"reserved {_mib(self.reserved)} MiB  RSS {_mib(self.rss)} MiB"
        )


@dataclass(frozen=True)
class TimedRequest:
    """One request of the soak: its place, its text's length, whether a prompt voice went with it, its time."""

    index: int
    chars: int
    prompted: bool
    seconds: float


@dataclass
class SoakResult:
    """One mode's run: its windows, how many text lengths it saw, its requests' times, and the long job after it."""

    label: str
    windows: list[Window] = field(default_factory=list)
    requests: list[TimedRequest] = field(default_factory=list)
    distinct_lengths: int = 0
    long_chars: int = 0
    long_s: float = 0.0
    long_peak_rss: int | None = None
    long_rss: int | None = None
    clean_rss: int | None = None

    @property
    def rss_ratio(self) -> float:
        return self.windows[-1].rss / max(self.windows[0].rss, 1)

    @property
    def rss_growth(self) -> int:
        """Highest window-end RSS after the first window, minus the first (the warm-up)."""
        return max(w.rss for w in self.windows[1:]) - self.windows[0].rss

    @property
    def p95_ratio(self) -> float:
        return self.windows[-1].p95_s / max(self.windows[0].p95_s, 1e-9)


@dataclass(frozen=True)
class Verdict:
    mode: str
    name: str
    value: str
    goal: str
    passed: bool

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.mode:<8} {self.name:<44} {self.value:<22} ({self.goal})"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MiB:.1f}"


def verdicts(result: SoakResult, args: argparse.Namespace) -> list[Verdict]:
    """The goals, judged on one mode's run (the managed run must pass; the naive control is shown failing)."""
    n = args.window
    out = [
        Verdict(
            result.label,
            f"worker RSS last-{n} ÷ first-{n}",
            f"x{result.rss_ratio:.3f}",
            f"≤ {args.rss_ratio:.2f}",
            result.rss_ratio <= args.rss_ratio,
        ),
        Verdict(
            result.label,
            "worker RSS growth after warm-up",
            f"{result.rss_growth / MiB:+.0f} MiB",
            f"≤ {args.rss_growth_mib:.0f} MiB",
            result.rss_growth <= args.rss_growth_mib * MiB,
        ),
        Verdict(
            result.label,
            f"latency p95 last-{n} ÷ first-{n}",
            f"x{result.p95_ratio:.2f}",
            f"≤ {args.p95_ratio:.2f}",
            result.p95_ratio <= args.p95_ratio,
        ),
    ]
    if result.clean_rss is not None:
        over = result.clean_rss - result.windows[0].rss
        out.append(
            Verdict(
                result.label,
                f"RSS after a {result.long_chars}-char job + Clean cache",
                f"{over / MiB:+.0f} MiB",
                f"≤ +{args.rss_growth_mib:.0f} MiB over the first window",
                over <= args.rss_growth_mib * MiB,
            )
        )
    return out


def print_windows(result: SoakResult) -> None:
    print(f"\n{result.label} ({result.distinct_lengths} distinct text lengths)")
    print(
        f"{'requests':>8} {'p50 s':>7} {'p95 s':>7} {'alloc MiB':>10} {'reserved MiB':>12} {'frag':>6} "
        f"{'NVML MiB':>9} {'RSS MiB':>8}"
    )
    for w in result.windows:
        print(
            f"{w.end:>8} {w.p50_s:>7.3f} {w.p95_s:>7.3f} {_mib(w.allocated):>10} {_mib(w.reserved):>12} "
            f"{w.fragmentation:>6.2f} {_mib(w.nvml_used):>9} {_mib(w.rss):>8}"
        )
    print("\n".join(tail_lines(result, after=result.windows[0].end if result.windows else 0)))
    if result.long_chars:
        print(
            f"long job: {result.long_chars} characters in {result.long_s:.1f} s; peak RSS during it "
            f"{_mib(result.long_peak_rss)} MiB, after it {_mib(result.long_rss)} MiB, "
            f"after Clean cache {_mib(result.clean_rss)} MiB"
        )


def tail_lines(result: SoakResult, after: int, count: int = 8) -> list[str]:
    """What sets the p95 after the warm-up (requests past ``after``): p95 of the plain and the prompted requests
    apart, and the ``count`` slowest requests with their length and kind."""
    import numpy as np

    later = [r for r in result.requests if r.index > after]
    if not later:
        return []
    lines = [f"after request {after}:"]
    for name, prompted in (("plain", False), ("with a prompt voice", True)):
        times = [r.seconds for r in later if r.prompted == prompted]
        if times:
            p50, p95 = np.percentile(times, 50), np.percentile(times, 95)
            lines.append(f"  {name}: {len(times)} requests, p50 {p50:.3f}s  p95 {p95:.3f}s  max {max(times):.3f}s")
    slowest = sorted(later, key=lambda r: r.seconds, reverse=True)[:count]
    lines.append("  slowest: " + ", ".join(
        f"#{r.index} {r.chars} chars{' +prompt' if r.prompted else ''} {r.seconds:.3f}s" for r in slowest
    ))  # fmt: skip
    return lines


def summary(result: SoakResult) -> dict[str, str]:
    first, last = result.windows[0], result.windows[-1]
    return {
        "p95 first→last": f"{first.p95_s:.3f} → {last.p95_s:.3f} s (x{last.p95_s / max(first.p95_s, 1e-9):.2f})",
        "allocated first→last": f"{_mib(first.allocated)} → {_mib(last.allocated)} MiB "
        f"({(last.allocated - first.allocated) / MiB:+.2f})",
        "reserved first→last (max)": f"{_mib(first.reserved)} → {_mib(last.reserved)} MiB "
        f"(max {_mib(max(w.reserved for w in result.windows))})",
        "NVML used first→last": f"{_mib(first.nvml_used)} → {_mib(last.nvml_used)} MiB",
        "RSS first→last (max)": f"{_mib(first.rss)} → {_mib(last.rss)} MiB "
        f"(max {_mib(max(w.rss for w in result.windows))})",
    }


def print_report(results: dict[str, SoakResult], args: argparse.Namespace) -> list[Verdict]:
    """Tables, the first-vs-last summary and the verdict lines; returns the verdicts."""
    for result in results.values():
        print_windows(result)
    print(f"\nfirst {args.window} vs last {args.window}")
    for result in results.values():
        for key, value in summary(result).items():
            print(f"  {result.label:<8} {key:<28} {value}")
    managed = results["managed"].windows
    print(f"\nmanaged allocated growth after warm-up: {(managed[-1].allocated - managed[0].allocated) / MiB:+.2f} MiB")
    judged: list[Verdict] = [v for result in results.values() for v in verdicts(result, args)]
    print("\ngoals (the managed run must pass them; the naive control is expected to fail the RSS ones)")
    for verdict in judged:
        print(verdict.line())
    print("\n" + "\n".join(rss_table(list(results.values()))))
    return judged


def rss_table(results: Sequence[SoakResult]) -> list[str]:
    """Markdown rows for docs/benchmarks.md: RSS and p95 first vs last window per mode."""
    rows = ["| mode | RSS first window (MiB) | RSS last (MiB) | ratio | growth (MiB) | p95 first → last (s) |"]
    rows.append("|---|---|---|---|---|---|")
    for r in results:
        rows.append(
            f"| {r.label} | {_mib(r.windows[0].rss)} | {_mib(r.windows[-1].rss)} | {r.rss_ratio:.3f} | "
            f"{r.rss_growth / MiB:+.0f} | {r.windows[0].p95_s:.3f} → {r.windows[-1].p95_s:.3f} |"
        )
    return rows
