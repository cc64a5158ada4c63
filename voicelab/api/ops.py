"""Operations: ``GET /health`` (open, a load balancer's probe), and behind the API key ``GET /v1/memory``,
``POST /v1/memory/clean``, ``POST /v1/engine/restart``, ``GET /v1/engine``, ``POST /v1/engine/backend`` and
``GET /metrics``.

Health and memory read the engine status and the telemetry ring (never waiting on the worker); clean and
restart run in the worker between jobs, like the panel's buttons, and answer before → after; choosing the voice
engine is a restart that loads the other backend (``voicelab.studio_engine``), as the page's choice is.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.params import Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field, field_validator

from voicelab.api.context import ApiContext
from voicelab.api.errors import api_field
from voicelab.api.memory import clean_dict, memory_report, restart_dict
from voicelab.engine.status import EngineStatus, WorkerStatus
from voicelab.engine.validation import as_bool, as_text
from voicelab.studio_engine import EngineChoices, EngineSwitch, engine_choices, switch_engine


class CleanBody(BaseModel):
    clear_profiles: bool = Field(False, description="Also drop the cached speaker profiles (true/false only).")

    @field_validator("clear_profiles", mode="before")
    @classmethod
    def _strict(cls, value: object) -> bool:
        return api_field(as_bool, "clear_profiles", value)


class RestartBody(BaseModel):
    force: bool = Field(
        False, description="Do not wait for the job in flight (it is run again from the start); true/false only."
    )

    @field_validator("force", mode="before")
    @classmethod
    def _strict(cls, value: object) -> bool:
        return api_field(as_bool, "force", value)


class BackendBody(BaseModel):
    backend: str = Field(description="The voice engine to run from now on: builtin or kokoro (GET /v1/engine).")
    force: bool = Field(
        False, description="Do not wait for the job in flight (it is run again on the new engine); true/false only."
    )

    @field_validator("backend", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        return api_field(as_text, "backend", value).strip()

    @field_validator("force", mode="before")
    @classmethod
    def _strict(cls, value: object) -> bool:
        return api_field(as_bool, "force", value)


def choices_body(choices: EngineChoices) -> dict[str, Any]:
    return {
        "backend": choices.current,
        "switchable": choices.switchable,
        "choices": [
            {"name": o.name, "label": o.label, "summary": o.summary, "available": o.problem is None,
             "problem": o.problem}
            for o in choices.options
        ],
    }  # fmt: skip


def switch_body(switch: EngineSwitch) -> dict[str, Any]:
    restarted = restart_dict(switch.report) if switch.report is not None else None
    return {"before": switch.before, "backend": switch.after, "restart": restarted}


def engine_state(status: EngineStatus) -> str:
    if status.ready:
        return "ready" if status.model_loaded else "ready (model offloaded while idle)"
    return "failed" if status.load_error else "starting"


def health_body(ctx: ApiContext, status: EngineStatus) -> dict[str, Any]:
    worker = status.worker
    return {
        "status": "ok" if status.ready else engine_state(status),
        "engine": engine_state(status),
        "backend": worker.backend if worker else None,
        "device": worker.device if worker else None,
        "dtype": worker.dtype if worker else None,
        "queue_length": status.queue_length,
        "queue_size": ctx.settings.queue_size,
        "in_flight": status.in_flight_job,
        "worker_pid": status.worker_pid or None,
        "worker_uptime_s": None if status.worker_uptime_s is None else round(status.worker_uptime_s, 1),
        "restarts": status.restarts,
        "completed": status.completed,
        "failed": status.failed,
        "load_error": status.load_error,
        "leak_warning": status.leak_warning,
        "workers": [worker_body(w) for w in status.workers],  # one per device; the fields above sum them
    }


def worker_body(worker: WorkerStatus) -> dict[str, Any]:
    return {
        "device": worker.label,
        "state": worker.state,
        "pid": worker.pid or None,
        "in_flight": list(worker.in_flight_jobs),
        "completed": worker.completed,
        "failed": worker.failed,
        "restarts": worker.restarts,
    }


def open_routes(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/health")
    def health() -> JSONResponse:
        """The engine's state; 503 until the worker is ready (and while it restarts)."""
        status = ctx.engine.status()
        return JSONResponse(health_body(ctx, status), status_code=200 if status.ready else 503)

    return router


def routes(ctx: ApiContext, auth: Depends) -> APIRouter:
    router = APIRouter(tags=["operations"], dependencies=[auth])

    @router.get("/v1/memory")
    def memory() -> dict[str, Any]:
        """The panel's memory figures (A1111 ``/sdapi/v1/memory`` names where they mean the same)."""
        return memory_report(ctx.engine.status(), ctx.telemetry.ring.latest(), ctx.events.totals())

    @router.post("/v1/memory/clean")
    def clean(body: CleanBody | None = None) -> dict[str, Any]:
        """Clean the device cache between jobs (ComfyUI ``/free``); before → after."""
        ctx.require_ready()
        return clean_dict(ctx.engine.clean_cache(clear_profiles=body.clear_profiles if body else False))

    @router.post("/v1/engine/restart")
    def restart(body: RestartBody | None = None) -> dict[str, Any]:
        """Soft restart: replace the worker process; queued jobs stay queued."""
        return restart_dict(ctx.engine.soft_restart(force=body.force if body else False))

    @router.get("/v1/engine")
    def engine() -> dict[str, Any]:
        """The voice engine running and those this studio offers (Kokoro's availability, why not)."""
        return choices_body(engine_choices(ctx.service))

    @router.post("/v1/engine/backend")
    def choose_engine(body: BackendBody) -> dict[str, Any]:
        """Run another voice engine: a Soft restart loading it; queued jobs stay queued and are spoken by it."""
        return switch_body(switch_engine(ctx.service, body.backend, body.force))

    @router.get("/metrics", response_class=Response)
    def metrics() -> Response:
        """Prometheus exposition format."""
        return Response(ctx.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
