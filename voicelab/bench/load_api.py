"""Load benchmark, HTTP API mode: N clients calling ``POST /v1/audio/speech`` the way scripts do.

    python -m voicelab bench load --api [--url http://127.0.0.1:7860] [--api-key KEY] [--clients 20] ...
    python -m voicelab bench load --ray --replicas 1,2 ...   (requests/s of 1 vs 2 Ray Serve replicas: load_ray)

The same run as ``bench load`` (``voicelab.bench.load``; the same flags, report and verdict) with API clients
instead of browser sessions: each submission carries a unique ``seed``, which the server echoes in ``X-Seed``
and History keeps, so every request is traced to exactly one outcome: ``ok`` (a WAV that decodes to speech),
``busy`` (a 429 with Retry-After and a clear sentence), ``error`` or ``lost``. A poller reads ``/health`` as the
"panel" (a load balancer's probe must stay fresh under load).
"""

from __future__ import annotations

import argparse
import functools
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

import httpx
import soundfile as sf

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


def speak_api_once(http: httpx.Client, submission: Submission, timeout_s: float) -> Outcome:
    """One /v1/audio/speech call; every way it can end becomes an Outcome."""
    body = {"input": submission.text, "seed": submission.seed, "response_format": "wav"}
    try:
        response = http.post("/v1/audio/speech", json=body, timeout=timeout_s)
    except httpx.TimeoutException:
        return Outcome(submission, "lost", time.monotonic(), message=f"no answer in {timeout_s:.0f} s")
    except httpx.HTTPError as exc:
        return Outcome(submission, "lost", time.monotonic(), message=f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        try:
            message = str(response.json()["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}: {response.text[:120]}"
        busy = response.status_code == 429 and "retry-after" in response.headers and is_clear_sentence(message)
        return Outcome(submission, "busy" if busy else "error", time.monotonic(), message=message)
    try:
        frames = sf.info(io.BytesIO(response.content)).frames
        audio, _ = sf.read(io.BytesIO(response.content), frames=frames if frames > 0 else -1)
    except (sf.SoundFileError, RuntimeError, ValueError) as exc:
        return Outcome(submission, "error", time.monotonic(), message=f"audio does not decode: {exc}")
    if len(audio) == 0:
        return Outcome(submission, "error", time.monotonic(), message="no audio in the answer")
    meta = f"seed {response.headers.get('x-seed', '')}"
    return Outcome(submission, "ok", time.monotonic(), audio_path=f"job:{response.headers.get('x-job-id')}", meta=meta)


def run_api_client(
    url: str, number: int, deadline: float, timeout_s: float, recorder: Recorder, headers: dict[str, str], nice: int
) -> None:
    """One API client submitting back to back until the deadline (``nice``: see ``load.run_client``)."""
    if nice:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    with httpx.Client(base_url=url, headers=headers) as http:
        index = 0
        while time.monotonic() < deadline:
            text = SENTENCES[(number + index) % len(SENTENCES)]
            submission = Submission(number, index, number * 1_000_000 + index, text, time.monotonic())
            recorder.submitted(submission)
            recorder.finished(speak_api_once(http, submission, timeout_s))
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


def run_load_api(args: argparse.Namespace) -> LoadReport:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with _studio(args) as (url, app, outputs):
        wait_healthy(url, args.ready_timeout)
        with httpx.Client(base_url=url, headers=headers) as warm:
            speak_api_once(warm, Submission(-1, 0, WARM_UP_SEED, "Warming up.", time.monotonic()), 120)
        memory_start = memory_of(app, url) if app is not None else None
        poller = HealthPoller(url, args.poll_interval)
        poller.start()
        client = functools.partial(run_api_client, url, headers=headers, nice=args.client_nice)
        report = drive_clients(client, args, poller)
        report.memory_start, report.memory_end = memory_start, memory_of(app, url) if app is not None else None
        if outputs is not None:
            report.saved_seeds = [s for s in _saved_seeds(outputs) if s != WARM_UP_SEED]
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``bench load``: browser sessions by default, API clients with ``--api``, replicas on Ray with ``--ray``."""
    if argv is not None and "--ray" in argv:
        from voicelab.bench.load_ray import main as ray_main

        return ray_main([arg for arg in argv if arg != "--ray"])
    args = parse_args(argv)
    target = args.url or f"app.py ({args.backend})"
    mode = "API clients" if args.api else "clients"
    print(f"load: {args.clients} {mode} for {args.duration:g} s against {target}")
    try:
        report = run_load_api(args) if args.api else run_load(args)
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"error: the load run could not start: {exc}", file=sys.stderr)
        return 2
    print_report(report, args.window)
    return 0 if report.passed else 1
