"""``python -m voicelab serve --ray``: VoiceLab as one Ray Serve application on a local or a running cluster.

    python -m voicelab serve --ray [--address auto|ray://HOST:10001] [--replicas N]
        [--gpus-per-replica 1] [--cpus-per-replica 1] [app.py's flags: --backend, --outputs-dir, --port, ...]

Two deployments: ``EngineReplica`` (one VoiceLab engine each, ``num_gpus`` per replica, routed by voice) and
``StudioIngress`` (the FastAPI app with the studio, on Serve's HTTP proxy at ``--host``/``--port``).
Without ``--address`` a local cluster is started in this process and stops with it; with one, the application
is deployed there (``--detach`` leaves it running). docs/ray.md has the cluster side.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from voicelab.backends.registry import preflight
from voicelab.cluster.board import NAMESPACE, ReplicaReport, board_handle, board_name
from voicelab.cluster.ingress import StudioIngress
from voicelab.cluster.replica import EngineReplica
from voicelab.settings import Settings, add_arguments, from_arguments

log = logging.getLogger(__name__)

JOBS_PER_REPLICA = 2  # one on the worker, one waiting on the replica so the worker never idles between jobs
READY = "VOICELAB READY"
LOCAL_START_TRIES = 3
ROUTER = "voicelab.cluster.router:VoiceRouter"  # Serve imports it in every process that routes


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how wide to deploy.

    address: "" starts a local cluster in this process; "auto" joins the one running on this machine;
    "ray://HOST:10001" a remote one. replicas: how many engine replicas. gpus_per_replica / cpus_per_replica:
    each replica's Ray resources.
    """

    address: str = ""
    replicas: int = 1
    gpus_per_replica: float = 0.0
    cpus_per_replica: float = 1.0
    app_name: str = "voicelab"
    dashboard: bool = True
    local_cpus: int | None = None  # a local cluster's logical CPUs (None: the machine's)
    replica_logs: bool = True  # the replicas' logs on this console (tests and benchmarks keep theirs quiet)

    @property
    def slots(self) -> int:
        """Replica tabs in the panel: the most replicas there can be."""
        return self.replicas


def replica_settings(settings: Settings, options: ClusterOptions) -> Settings:
    """One worker per replica, on the GPU Ray gave it (``CUDA_VISIBLE_DEVICES`` makes it ``cuda:0`` there)."""
    device = "cuda" if options.gpus_per_replica > 0 else "cpu"
    return replace(settings, device=device, devices="")


def build_application(settings: Settings, options: ClusterOptions, dashboard_url: str = "") -> Any:
    """The ingress bound to the engine deployment (an ``Application`` for ``serve.run``)."""
    engines = serve.deployment(EngineReplica).options(  # type: ignore[attr-defined]
        name="EngineReplica",
        max_ongoing_requests=JOBS_PER_REPLICA,
        max_queued_requests=settings.queue_size,
        ray_actor_options={"num_cpus": options.cpus_per_replica, "num_gpus": options.gpus_per_replica},
        request_router_config={"request_router_class": ROUTER},
        health_check_period_s=2.0,
        graceful_shutdown_timeout_s=15.0,
        num_replicas=options.replicas,
    )
    ingress = serve.deployment(serve.ingress()(StudioIngress)).options(  # type: ignore[attr-defined]
        name="StudioIngress", num_replicas=1, max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0}
    )
    engine = engines.bind(replica_settings(settings, options), options.app_name)
    return ingress.bind(engine, settings, options.app_name, options.slots, dashboard_url)


def connect(options: ClusterOptions) -> str:
    """Join or start the cluster; returns the Ray dashboard's URL ("" without one). Every process of the
    cluster imports VoiceLab (and a test's fixture backends) from where this one does."""
    here = [str(Path(__file__).resolve().parents[2]), os.getcwd(), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in here if p), "GRADIO_ANALYTICS_ENABLED": "False"}
    kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env}, "namespace": NAMESPACE}
    kwargs["log_to_driver"] = options.replica_logs
    context = ray.init(address=options.address, **kwargs) if options.address else start_local(options, kwargs)
    return str(getattr(context, "dashboard_url", "") or "")


def start_local(options: ClusterOptions, kwargs: dict[str, Any]) -> Any:
    """A local cluster; tried again when its raylet took longer than Ray's fixed 30 s to register (a loaded CPU)."""
    for attempt in range(1, LOCAL_START_TRIES + 1):
        try:
            return ray.init(num_cpus=options.local_cpus, include_dashboard=options.dashboard,
                            object_store_memory=200 * 2**20, **kwargs)  # fmt: skip
        except Exception as exc:  # Ray raises a bare Exception for this one
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_TRIES:
                raise
            log.warning("the local Ray cluster was slow to start (%s); trying again", exc)
            ray.shutdown()
    raise AssertionError("unreachable")


def deploy(settings: Settings, options: ClusterOptions, dashboard_url: str = "") -> DeploymentHandle:
    """Start Serve's HTTP proxy on ``settings.host:port`` and run the application there (at ``/``).

    Serve keeps the proxy's address from its first start on a cluster: a later deployment with another port is
    still served on the first one."""
    serve.start(http_options={"host": settings.host, "port": settings.port})
    application = build_application(settings, options, dashboard_url)
    handle: DeploymentHandle = serve.run(application, name=options.app_name, route_prefix="/", blocking=False)
    return handle


def wait_for_engines(app_name: str, timeout_s: float = 600.0) -> str | None:
    """Until a replica's engine is ready (``None``) or every reporting replica failed to load (its error)."""
    board = board_handle(app_name)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reports: list[ReplicaReport] = ray.get(board.reports.remote())
        if any(r.engine.ready for r in reports):
            return None
        if reports and all(r.engine.load_error for r in reports):
            return reports[0].engine.load_error
        time.sleep(0.5)
    return f"no engine replica was ready after {timeout_s:.0f} s"


def undeploy(options: ClusterOptions) -> None:
    """Delete the application and its replica board (the cluster itself stays up)."""
    serve.delete(options.app_name)
    with contextlib.suppress(ValueError):  # already gone
        ray.kill(ray.get_actor(board_name(options.app_name), namespace=NAMESPACE))


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, ClusterOptions, bool]:
    parser = argparse.ArgumentParser(prog="python -m voicelab serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray", action="store_true", required=True, help="serve on Ray Serve (required)")
    parser.add_argument("--address", default="", help="a running cluster (auto, ray://HOST:10001); none: local")
    parser.add_argument("--replicas", type=int, default=1, help="engine replicas")
    parser.add_argument("--gpus-per-replica", type=float, default=0.0, help="GPUs each replica holds (0: CPU)")
    parser.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs each replica holds")
    parser.add_argument("--app-name", default="voicelab", help="the Serve application's name")
    parser.add_argument("--detach", action="store_true", help="deploy and exit (needs --address)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    if args.detach and not args.address:
        parser.error("--detach needs --address: a local cluster stops with this process")
    options = ClusterOptions(args.address, args.replicas, args.gpus_per_replica,
                             args.cpus_per_replica, args.app_name)  # fmt: skip
    return from_arguments(args), options, bool(args.detach)


def main(argv: Sequence[str] | None = None) -> int:
    settings, options, detach = parse_args(argv)
    problem = preflight(settings)  # an optional backend that cannot start, said before any cluster starts
    if problem:
        print(problem, file=sys.stderr, flush=True)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the finally below: the application is deleted
    logging.basicConfig(level=os.environ.get("VOICELAB_LOG_LEVEL", "INFO"))
    dashboard = connect(options)
    if dashboard and not dashboard.startswith("http"):
        dashboard = f"http://{dashboard}"
    deploy(settings, options, dashboard)
    if dashboard:
        print(f"Ray dashboard: {dashboard}", flush=True)
    problem = wait_for_engines(options.app_name)  # the page is up meanwhile, saying the engine is starting
    if problem:
        log.error("the engine is not ready: %s", problem)
    print(f"{READY} http://{settings.host}:{settings.port}", flush=True)
    if detach:
        return 0
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        undeploy(options)
        ray.shutdown()
    return 0
