"""Load benchmark, HTTP API mode: N clients calling ``POST /v1/audio/speech`` the way scripts do.

    python -m voicelab bench load --api [--url http://127.0.0.1:7860] [--api-key KEY] [--clients 1,8,16]
        [--format pcm] [--chars 188] [--voice NAME] [--app-args "--backend-options decode_slots=16"] ...
    python -m voicelab bench load --ray --replicas 1,2 ...   (requests/s of 1 vs 2 Ray Serve replicas: load_ray)

The same run as ``bench load`` (``voicelab.bench.load``; the same flags, report and verdict) with API clients
instead of browser sessions, once per client count (each for ``--duration``, one server, after one unmeasured
request per client at the largest count), then the time to first byte per count (``first_byte.py``). Each
submission carries a unique ``seed``, which the server echoes in ``X-Seed``
and History keeps, so every request is traced to exactly one outcome: ``ok`` (a WAV that decodes to speech),
``busy`` (a 429 with Retry-After and a clear sentence), ``error`` or ``lost``. A poller reads ``/health`` as the
"panel" (a load balancer's probe must stay fresh under load).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

import httpx
import soundfile as sf

from voicelab.bench.first_byte import FirstByteRow, first_byte_row, request_text, summary_lines
from voicelab.bench.load import (
    SENTENCES,
    WARM_UP_SEED,
    LoadReport,
    Outcome,
    Recorder,
    Submission,
    _saved_seeds,
    _studio,
    drive_clients,
    is_clear_sentence,
    parse_args,
    print_report,
    run_load,
)
from voicelab.bench.studio import PanelPoll, memory_of

log = logging.getLogger(__name__)


def speak_api_once(
    http: httpx.Client, submission: Submission, timeout_s: float, response_format: str = "wav", voice: str = ""
) -> Outcome:
    """One /v1/audio/speech call, read as a stream (when its first audio byte came is kept); every way it can end
    becomes an Outcome."""
    body = {"input": submission.text, "seed": submission.seed, "response_format": response_format}
    if voice:
        body["voice"] = voice
    try:
        with http.stream("POST", "/v1/audio/speech", json=body, timeout=timeout_s) as response:
            first_byte_at, content = _read_stream(response)
    except httpx.TimeoutException:
        return Outcome(submission, "lost", time.monotonic(), message=f"no answer in {timeout_s:.0f} s")
    except httpx.HTTPError as exc:
        return Outcome(submission, "lost", time.monotonic(), message=f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        try:
            message = str(json.loads(content)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}: {content[:120].decode(errors='replace')}"
        busy = response.status_code == 429 and "retry-after" in response.headers and is_clear_sentence(message)
        return Outcome(submission, "busy" if busy else "error", time.monotonic(), message=message)
    problem = _audio_problem(content, response_format)
    if problem:
        return Outcome(submission, "error", time.monotonic(), message=problem)
    meta = f"seed {response.headers.get('x-seed', '')}"
    job = f"job:{response.headers.get('x-job-id')}"
    return Outcome(submission, "ok", time.monotonic(), audio_path=job, meta=meta, first_byte_at=first_byte_at)


def _read_stream(response: httpx.Response) -> tuple[float, bytes]:
    """The answer's body and when its first byte arrived."""
    first_byte_at, pieces = 0.0, []
    for piece in response.iter_bytes():
        if piece and not first_byte_at:
            first_byte_at = time.monotonic()
        pieces.append(piece)
    return first_byte_at, b"".join(pieces)


def _audio_problem(content: bytes, response_format: str) -> str:
    """Why the answer is not audio ("" when it is): a WAV must decode, raw PCM must be whole 16-bit samples."""
    if response_format == "pcm":
        return "" if content and len(content) % 2 == 0 else "no whole 16-bit samples in the answer"
    try:
        frames = sf.info(io.BytesIO(content)).frames
        audio, _ = sf.read(io.BytesIO(content), frames=frames if frames > 0 else -1)
    except (sf.SoundFileError, RuntimeError, ValueError) as exc:
        return f"audio does not decode: {exc}"
    return "" if len(audio) else "no audio in the answer"


def run_api_client(
    url: str,
    number: int,
    deadline: float,
    timeout_s: float,
    recorder: Recorder,
    headers: dict[str, str],
    args: argparse.Namespace,
    first_seed: int = 0,
) -> None:
    """One API client submitting back to back until the deadline (``args.client_nice``: see ``load.run_client``);
    seeds from ``first_seed`` on, so several client counts in one run never repeat one."""
    if args.client_nice:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), args.client_nice)
    with httpx.Client(base_url=url, headers=headers) as http:
        index = 0
        while time.monotonic() < deadline:
            text = request_text(SENTENCES, number + index, args.chars)
            submission = Submission(number, index, first_seed + number * 1_000_000 + index, text, time.monotonic())
            recorder.submitted(submission)
            recorder.finished(speak_api_once(http, submission, timeout_s, args.format, args.voice))
            index += 1


class HealthPoller(threading.Thread):
    """Asks ``/health`` every ``interval_s``; each answer (or failure) is one ``PanelPoll``."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        super().__init__(name="health-poller", daemon=True)
        self.url, self.interval_s = url, interval_s
        self.polls: list[PanelPoll] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10.0) as http:
            while not self.stop_event.is_set():
                began = time.monotonic()
                try:
                    health = http.get("/health").raise_for_status().json()
                    self.polls.append(
                        PanelPoll(time.monotonic(), True, time.monotonic() - began, health["queue_length"])
                    )
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    log.warning("health poll failed: %s", exc)
                    self.polls.append(PanelPoll(time.monotonic(), False, time.monotonic() - began))
                self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - began)))


def wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(f"{url}/health", timeout=10)
        if response.status_code == 200:
            return
        if response.json().get("status") == "failed":
            raise RuntimeError(f"the engine failed to load: {response.json().get('load_error')}")
        time.sleep(1.0)
    raise RuntimeError(f"the engine was not ready after {timeout_s:.0f} s")


def warm_up(url: str, headers: dict[str, str], clients: int, args: argparse.Namespace) -> None:
    """One unmeasured request per client at once (a backend that runs jobs side by side warms each job thread)."""
    text = request_text(SENTENCES, 0, args.chars) if args.chars else "Warming up."

    def one(number: int) -> None:
        with httpx.Client(base_url=url, headers=headers) as http:
            submission = Submission(-1, number, WARM_UP_SEED - number, text, time.monotonic())
            speak_api_once(http, submission, args.request_timeout, args.format, args.voice)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.request_timeout)


def run_load_api(args: argparse.Namespace) -> list[LoadReport]:
    """One report per client count of ``args.clients``, against one server."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    reports = []
    with _studio(args) as (url, app, outputs):
        wait_healthy(url, args.ready_timeout)
        warm_up(url, headers, max(args.clients), args)
        for number, clients in enumerate(args.clients):
            memory_start = memory_of(app, url) if app is not None else None
            poller = HealthPoller(url, args.poll_interval)
            poller.start()
            client = functools.partial(run_api_client, url, headers=headers, args=args, first_seed=number * 10**8)
            report = drive_clients(client, args, poller, clients)
            report.memory_start, report.memory_end = memory_start, memory_of(app, url) if app is not None else None
            reports.append(report)
        if outputs is not None:
            saved = [s for s in _saved_seeds(outputs) if s <= WARM_UP_SEED - max(args.clients)]
            for report in reports:
                sent = {o.submission.seed for o in report.outcomes}
                report.saved_seeds = [s for s in saved if s in sent]
    return reports


def first_byte_rows(reports: Sequence[LoadReport], counts: Sequence[int]) -> list[FirstByteRow]:
    rows = []
    for clients, report in zip(counts, reports, strict=True):
        ok = [o for o in report.outcomes if o.kind == "ok" and o.first_byte_s is not None]
        rows.append(first_byte_row(clients, [o.first_byte_s or 0.0 for o in ok], [o.latency_s for o in ok]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``bench load``: browser sessions by default, API clients with ``--api``, replicas on Ray with ``--ray``."""
    if argv is not None and "--ray" in argv:
        from voicelab.bench.load_ray import main as ray_main

        return ray_main([arg for arg in argv if arg != "--ray"])
    args = parse_args(argv)
    target = args.url or f"app.py ({args.backend})"
    mode = "API clients" if args.api else "clients"
    counts = ",".join(map(str, args.clients))
    print(f"load: {counts} {mode} for {args.duration:g} s against {target}")
    try:
        reports = run_load_api(args) if args.api else [run_load(args)]
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"error: the load run could not start: {exc}", file=sys.stderr)
        return 2
    for clients, report in zip(args.clients, reports, strict=True):
        if len(reports) > 1:
            print(f"--- {clients} {mode}")
        print_report(report, args.window)
    if args.api:
        label = f"{args.format}, {len(request_text(SENTENCES, 0, args.chars))} characters"
        print("\n".join(summary_lines(first_byte_rows(reports, args.clients), label)))
    return 0 if all(r.passed for r in reports) else 1
