"""Load benchmark on Ray Serve: requests/s of the OpenAI speech route with 1 vs N engine replicas, one run.

    python -m voicelab bench load --ray --replicas 1,2 [--clients 6] [--duration 20] [--backend NAME]
        [--text "..."] [--address auto]

One Ray cluster (local unless ``--address``); for each width the application is deployed with that many engine
replicas, every replica warmed, then ``--clients`` API clients call ``POST /v1/audio/speech`` back to back for
``--duration`` seconds. Each width's requests/s (answers with audio per second), busy answers, errors and median
latency print side by side, ending with ``requests/s ratio (N replicas / 1): X``. With the test backend
(``--backend tests.fixture_backends:ToneBackend --text "sleep 0.25"``) a job holds its replica's single-flight
engine for a fixed time, as a GPU job does, so the ratio shows what the replicas add on top of the routing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from voicelab.bench.studio import free_port
from voicelab.settings import Settings

WARM_UPS_PER_REPLICA = 3


@dataclass
class WidthResult:
    """One width's run: outcomes counted by kind, latencies of the answers with audio."""

    replicas: int
    duration_s: float
    ok: int = 0
    busy: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float:
        return self.ok / self.duration_s

    def line(self) -> str:
        p50 = statistics.median(self.latencies) if self.latencies else 0.0
        return (
            f"{self.replicas:>8}  {self.requests_per_s:>10.2f}  {self.ok:>5}  {self.busy:>4}  {self.errors:>6}  "
            f"{p50:>8.2f} s"
        )


def client_loop(url: str, text: str, deadline: float, result: WidthResult, lock: threading.Lock) -> None:
    """One API client: requests back to back until the deadline; an answer after it still counts as it ends."""
    with httpx.Client(base_url=url, timeout=120.0) as http:
        while time.monotonic() < deadline:
            began = time.monotonic()
            try:
                response = http.post("/v1/audio/speech", json={"input": text, "response_format": "wav"})
                code = response.status_code
                ok = code == 200 and len(response.content) > 44
            except httpx.HTTPError:
                code, ok = 0, False
            with lock:
                if ok:
                    result.ok += 1
                    result.latencies.append(time.monotonic() - began)
                elif code == 429:
                    result.busy += 1
                else:
                    result.errors += 1


def drive(url: str, replicas: int, args: argparse.Namespace) -> WidthResult:
    with httpx.Client(base_url=url, timeout=120.0) as http:
        for _ in range(WARM_UPS_PER_REPLICA * replicas):
            http.post("/v1/audio/speech", json={"input": args.text, "response_format": "wav"}).raise_for_status()
    result, lock = WidthResult(replicas, args.duration), threading.Lock()
    deadline = time.monotonic() + args.duration
    threads = [
        threading.Thread(target=client_loop, args=(url, args.text, deadline, result, lock), daemon=True)
        for _ in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def wait_ready(url: str, replicas: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            workers = httpx.get(f"{url}/health", timeout=5).json().get("workers", [])
            if sum(w["state"] == "ready" for w in workers) >= replicas:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{replicas} replicas were not ready after {timeout_s:.0f} s")


def run_widths(args: argparse.Namespace, widths: Sequence[int]) -> list[WidthResult]:
    from voicelab.cluster.deploy import ClusterOptions, connect, deploy, undeploy

    results = []
    base = ClusterOptions(address=args.address, cpus_per_replica=args.cpus_per_replica, app_name="voicelab-bench",
                          dashboard=False, gpus_per_replica=args.gpus_per_replica, replica_logs=False)  # fmt: skip
    connect(base)
    port = free_port()  # Serve's HTTP proxy keeps the port it started on for every later deployment
    with tempfile.TemporaryDirectory(prefix="voicelab-ray-load-") as outputs:
        for width in widths:
            settings = Settings(backend=args.backend, outputs_dir=outputs, port=port, torch_threads=1)
            options = ClusterOptions(**{**base.__dict__, "replicas": width})
            deploy(settings, options)
            url = f"http://127.0.0.1:{settings.port}"
            try:
                wait_ready(url, width, args.ready_timeout)
                results.append(drive(url, width, args))
            finally:
                undeploy(options)
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m voicelab bench load --ray", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,2", help="widths to compare, the first is the baseline")
    parser.add_argument("--clients", type=int, default=6, help="API clients at once")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of requests per width")
    parser.add_argument("--backend", default="builtin", help="the replicas' backend")
    parser.add_argument("--text", default="The quick brown fox jumps over the lazy dog.", help="what each says")
    parser.add_argument("--address", default="", help="a running Ray cluster (default: a local one)")
    parser.add_argument("--cpus-per-replica", type=float, default=0.5)
    parser.add_argument("--gpus-per-replica", type=float, default=0.0)
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    widths = [int(w) for w in args.replicas.split(",") if w.strip()]
    if not widths or min(widths) < 1:
        print("error: --replicas takes widths such as 1,2")
        return 2
    print(f"ray load: {args.clients} API clients for {args.duration:g} s per width, backend {args.backend}, "
          f"text {args.text!r}")  # fmt: skip
    results = run_widths(args, widths)
    import ray

    ray.shutdown()
    print("replicas  requests/s     ok  busy  errors  p50 latency")
    for result in results:
        print(result.line())
    base = results[0]
    for result in results[1:]:
        ratio = result.requests_per_s / base.requests_per_s if base.requests_per_s else 0.0
        print(f"requests/s ratio ({result.replicas} replicas / {base.replicas}): {ratio:.2f}")
    return 0
