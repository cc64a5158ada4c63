"""Load benchmark: many browser-like clients at once against the running studio.

    python -m voicelab bench load [--url http://127.0.0.1:7860] [--clients 20] [--duration 120]
                                  [--backend piper] [--queue-size 16] [--device cpu]   (main: load_api.main)

Without ``--url`` it starts ``app.py`` itself (a scratch outputs folder, a free port) and stops it afterwards.
Each client is its own ``gradio_client`` session calling the public ``/speak`` endpoint in a loop until the
duration is up, with a seed unique to each submission, so every outcome can be traced back to exactly one
submission. Meanwhile a poller asks for the resource panel the way the browser's 1 s timer does and records
how long the panel ever went without a fresh answer. Every request must end with audio or a clear "busy"
sentence: none lost, none duplicated. The exit code is 0 only if that holds and the panel never went stale.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import logging
import math
import os
import re
import shlex
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from voicelab.bench.first_byte import add_stream_flags, client_counts
from voicelab.bench.studio import AppProcess, Memory, PanelPoll, PanelPoller, memory_of, wait_engine_ready

log = logging.getLogger(__name__)

STALE_LIMIT_S = 2.0
WARM_UP_SEED = 2**31 - 1  # client seeds are client * 1e6 + index, far below this
SENTENCES = (
    "The kettle began to sing on the stove.",
    "Could you tell me the way to the station, please?",
    "Rain drummed softly on the tin roof all night.",
    "Twelve boats drifted slowly out of the harbour.",
    "Please remember to water the plants.",
    "Why does the river sound louder at night?",
)
SPEAK_DEFAULTS = (1.0, 0.667, 0.8, 0.2)  # speed, noise scale, noise w, silence: the sliders as they start


@dataclass(frozen=True)
class Submission:
    client: int
    index: int
    seed: int
    text: str
    sent_at: float


@dataclass(frozen=True)
class Outcome:
    """How one submission ended: ``ok`` (audio), ``busy``, ``error`` (another sentence) or ``lost``."""

    submission: Submission
    kind: str
    finished_at: float
    audio_path: str = ""
    meta: str = ""
    message: str = ""
    first_byte_at: float = 0.0  # when the answer's first audio byte arrived (API clients; 0: not measured)

    @property
    def latency_s(self) -> float:
        return self.finished_at - self.submission.sent_at

    @property
    def first_byte_s(self) -> float | None:
        return self.first_byte_at - self.submission.sent_at if self.first_byte_at else None

    @property
    def echoed_seed(self) -> int | None:
        match = re.search(r"seed (\d+)", self.meta)
        return int(match.group(1)) if match else None


@dataclass
class LoadReport:
    """Everything the run measured; ``passed`` is the benchmark's verdict."""

    submissions: list[Submission]
    outcomes: list[Outcome]
    polls: list[PanelPoll]
    started_at: float
    ended_at: float
    memory_start: Memory | None = None
    memory_end: Memory | None = None
    saved_seeds: list[int] | None = None  # from the history folder, when this run owns it
    notes: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    @property
    def lost(self) -> int:
        finished = {(o.submission.client, o.submission.index) for o in self.outcomes if o.kind != "lost"}
        return sum(1 for s in self.submissions if (s.client, s.index) not in finished)

    @property
    def duplicated(self) -> int:
        """Outcomes beyond one per submission, audio files handed out twice, seeds echoed twice or wrongly."""
        per_submission = Counter((o.submission.client, o.submission.index) for o in self.outcomes)
        ok = [o for o in self.outcomes if o.kind == "ok"]
        paths = Counter(o.audio_path for o in ok)
        seeds = Counter(o.echoed_seed for o in ok)
        wrong_seed = sum(1 for o in ok if o.echoed_seed != o.submission.seed)
        saved = Counter(self.saved_seeds or [])
        return (
            sum(n - 1 for n in per_submission.values())
            + sum(n - 1 for n in paths.values())
            + sum(n - 1 for n in seeds.values())
            + wrong_seed
            + sum(n - 1 for n in saved.values())
        )

    @property
    def unsaved(self) -> int:
        """Audio handed out that the history folder does not hold (only known when this run owns the folder)."""
        if self.saved_seeds is None:
            return 0
        return len({o.submission.seed for o in self.outcomes if o.kind == "ok"} - set(self.saved_seeds))

    @property
    def max_staleness_s(self) -> float:
        """The longest time the panel went without a fresh answer (including the run's last stretch)."""
        times = [p.at for p in self.polls if p.ok]
        if not times:
            return float("inf")
        edges = [self.started_at, *times, self.ended_at]
        return max(b - a for a, b in itertools.pairwise(edges))

    @property
    def passed(self) -> bool:
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.count("error") == 0
            and self.unsaved == 0
            and self.max_staleness_s <= STALE_LIMIT_S
        )


# ---------------------------------------------------------------- the clients


class Recorder:
    """Submissions and outcomes from every client thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.submissions: list[Submission] = []
        self.outcomes: list[Outcome] = []

    def submitted(self, submission: Submission) -> None:
        with self._lock:
            self.submissions.append(submission)

    def finished(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)


def audio_path(value: Any) -> str:
    """The server-side file of a returned audio value (a FileData dict, an object with ``path``, or a str)."""
    if isinstance(value, dict):
        return str(value.get("path") or value.get("url") or "")
    return str(getattr(value, "path", value) or "")


def is_clear_sentence(message: str) -> bool:
    """What a user-facing refusal must look like: one short line ending in a period, nothing from a traceback."""
    return len(message) < 200 and message.endswith(".") and not any(m in message for m in ("\n", "Errno", "Traceback"))


def speak_once(client: Any, submission: Submission, timeout_s: float) -> Outcome:
    """One /speak call; every way it can end becomes an Outcome (nothing escapes uncounted)."""
    from gradio_client.exceptions import AppError

    job = client.submit(submission.text, *SPEAK_DEFAULTS, submission.seed, api_name="/speak")
    try:
        audio, *_subtitles, meta = job.result(timeout=timeout_s)  # (saved audio, subtitles, status line)
    except AppError as exc:
        message = str(exc.message)
        kind = "busy" if "busy" in message.lower() and is_clear_sentence(message) else "error"
        return Outcome(submission, kind, time.monotonic(), message=message)
    except TimeoutError:
        job.cancel()
        return Outcome(submission, "lost", time.monotonic(), message=f"no answer in {timeout_s:.0f} s")
    except Exception as exc:  # a transport failure is a lost request, whatever its type
        return Outcome(submission, "lost", time.monotonic(), message=f"{type(exc).__name__}: {exc}")
    path = audio_path(audio)
    if not path:
        return Outcome(submission, "error", time.monotonic(), meta=str(meta), message="no audio in the answer")
    return Outcome(submission, "ok", time.monotonic(), audio_path=path, meta=str(meta))


def run_client(url: str, number: int, deadline: float, timeout_s: float, recorder: Recorder, nice: int = 0) -> None:
    """One browser session submitting back to back until the deadline.

    ``nice`` lowers this thread's CPU priority (threads gradio_client starts inherit it): on one machine the
    simulated browsers must not starve the server they measure; real browsers run on other machines.
    """
    from gradio_client import Client

    if nice:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    client = Client(url, verbose=False, download_files=False)
    try:
        index = 0
        while time.monotonic() < deadline:
            text = SENTENCES[(number + index) % len(SENTENCES)]
            submission = Submission(number, index, number * 1_000_000 + index, text, time.monotonic())
            recorder.submitted(submission)
            recorder.finished(speak_once(client, submission, timeout_s))
            index += 1
    finally:
        client.close()


# ---------------------------------------------------------------- one run


def _saved_seeds(outputs: Path) -> list[int]:
    seeds = []
    for sidecar in (outputs / "history").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            seeds.append(int(json.loads(sidecar.read_text(encoding="utf-8"))["settings"]["seed"]))
    return seeds


@contextlib.contextmanager
def _studio(args: argparse.Namespace) -> Iterator[tuple[str, AppProcess | None, Path | None]]:
    """The app under test: the given URL, or app.py started here with a scratch outputs folder."""
    if args.url:
        yield args.url.rstrip("/"), None, None
        return
    with tempfile.TemporaryDirectory(prefix="voicelab-load-") as scratch:
        outputs = Path(args.outputs_dir or scratch)
        flags = ["--outputs-dir", str(outputs), "--backend", args.backend]
        for name in ("queue_size", "device", "torch_threads"):
            if getattr(args, name) is not None:
                flags += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        flags += shlex.split(args.app_args)
        app = AppProcess(flags)
        try:
            yield app.url, app, outputs
        finally:
            app.stop()


class Poller(Protocol):
    """A background thread that records polls of the studio while the clients run."""

    polls: list[PanelPoll]
    stop_event: threading.Event

    def join(self, timeout: float | None = None) -> None: ...


def drive_clients(client: Callable[..., None], args: argparse.Namespace, poller: Poller, clients: int) -> LoadReport:
    """``clients`` threads of ``client(number, deadline, timeout_s, recorder)`` until ``args.duration`` ends."""
    recorder = Recorder()
    started = time.monotonic()
    deadline = started + args.duration
    threads = [
        threading.Thread(target=client, args=(n, deadline, args.request_timeout, recorder), daemon=True)
        for n in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + args.request_timeout + 60 - time.monotonic()))
    ended = time.monotonic()
    poller.stop_event.set()
    poller.join(15)
    report = LoadReport(recorder.submissions, recorder.outcomes, poller.polls, started, ended)
    if any(t.is_alive() for t in threads):
        report.notes.append("some clients were still waiting when the run ended")
    return report


def run_load(args: argparse.Namespace) -> LoadReport:
    with _studio(args) as (url, app, outputs):
        wait_engine_ready(url, args.ready_timeout)
        from gradio_client import Client

        warm = Client(url, verbose=False, download_files=False)
        warm.predict("Warming up.", *SPEAK_DEFAULTS, WARM_UP_SEED, api_name="/speak")
        warm.close()
        memory_start = memory_of(app, url)
        poller = PanelPoller(url, args.poll_interval)
        poller.start()
        client = functools.partial(run_client, url, nice=args.client_nice)
        report = drive_clients(client, args, poller, args.clients[0])
        report.memory_start, report.memory_end = memory_start, memory_of(app, url)
        if outputs is not None:
            report.saved_seeds = [s for s in _saved_seeds(outputs) if s != WARM_UP_SEED]
    return report


# ---------------------------------------------------------------- the printout


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:.0f} MiB"


def window_rows(report: LoadReport, window_s: float) -> list[str]:
    rows = [
        f"{'t (s)':>6} {'sent':>5} {'ok':>5} {'busy':>5} {'error':>5} {'p50 s':>6} {'p95 s':>6} {'panel gap s':>11}"
    ]
    end = max(report.ended_at - report.started_at, window_s)
    t = window_s
    while t < end + window_s:
        lo, hi = report.started_at + t - window_s, report.started_at + t
        sent = sum(1 for s in report.submissions if lo <= s.sent_at < hi)
        done = [o for o in report.outcomes if lo <= o.finished_at < hi]
        latencies = sorted(o.latency_s for o in done if o.kind == "ok")
        p50 = f"{statistics.median(latencies):.2f}" if latencies else "—"
        p95 = f"{latencies[math.ceil(0.95 * len(latencies)) - 1]:.2f}" if latencies else "—"  # nearest rank
        times = [lo, *[p.at for p in report.polls if p.ok and lo <= p.at < hi], min(hi, report.ended_at)]
        gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
        counts = Counter(o.kind for o in done)
        rows.append(
            f"{t:>6.0f} {sent:>5} {counts['ok']:>5} {counts['busy']:>5} {counts['error']:>5} {p50:>6} {p95:>6} "
            f"{gap:>11.2f}"
        )
        t += window_s
    return rows


def print_report(report: LoadReport, window_s: float) -> None:
    for row in window_rows(report, window_s):
        print(row)
    for message, n in Counter(o.message for o in report.outcomes if o.kind in ("error", "lost")).most_common(5):
        print(f"  {n} x {message}")
    for note in report.notes:
        print(f"note: {note}")
    start, end = report.memory_start or Memory(None, None), report.memory_end or Memory(None, None)
    saved = "" if report.saved_seeds is None else f" saved: {len(report.saved_seeds)} unsaved: {report.unsaved}"
    print(
        f"requests: {len(report.submissions)} ok: {report.count('ok')} busy: {report.count('busy')} "
        f"errors: {report.count('error')} lost: {report.lost} duplicated: {report.duplicated}{saved}"
    )
    polls = [p for p in report.polls if p.ok]
    slowest = max((p.took_s for p in polls), default=float("nan"))
    print(
        f"max panel staleness: {report.max_staleness_s:.2f} s ({len(polls)} panel answers, slowest {slowest:.2f} s, "
        f"{len(report.polls) - len(polls)} failed; limit {STALE_LIMIT_S:g} s)"
    )
    print(
        f"RSS start → end: UI {_mib(start.ui_rss)} → {_mib(end.ui_rss)}, "
        f"worker {_mib(start.worker_rss)} → {_mib(end.worker_rss)}"
    )
    print(f"verdict: {'PASS' if report.passed else 'FAIL'}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="", help="a running studio; default: start app.py here")
    parser.add_argument("--clients", type=client_counts, default=[20], help="with --api several: 1,8,16")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of submitting")
    parser.add_argument("--backend", default="builtin", help="when starting the app")
    parser.add_argument("--queue-size", type=int, help="when starting the app (its default otherwise)")
    parser.add_argument("--device", help="when starting the app (its default otherwise)")
    parser.add_argument("--torch-threads", type=int, help="when starting the app")
    parser.add_argument("--outputs-dir", default="", help="when starting the app; default: a scratch folder")
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--poll-interval", type=float, default=0.5, help="seconds between panel requests")
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    parser.add_argument("--client-nice", type=int, default=10, help="CPU niceness of the client threads (0: off)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per table row")
    parser.add_argument("--api", action="store_true", help="drive POST /v1/audio/speech instead of the UI")
    parser.add_argument(
        "--api-key",
        default="",
        help="with --api: an API key of a login of the server's --auth (python -m voicelab keys add LOGIN)",
    )
    add_stream_flags(parser)
    args = parser.parse_args(argv)
    if len(args.clients) > 1 and not args.api:
        parser.error("several client counts need --api")
    return args
