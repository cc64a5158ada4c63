"""Application settings: defaults, then VOICELAB_* environment variables, then command-line flags."""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

API_KEYS_FILENAME = "api-keys.json"


@dataclass(frozen=True)
class Settings:
    """Every knob in one place; field names map to ``VOICELAB_<NAME>`` environment variables."""

    host: str = "127.0.0.1"
    port: int = 7860
    backend: str = "auto"  # auto (Kokoro on CUDA, else builtin), a name in registry.BACKENDS, or "module:factory"
    voice_path: str = ""  # piper: a voice .onnx; empty: the built-in en_US-joe-medium voice
    model_dir: str = ""  # backends that load a model directory (e.g. CosyVoice)
    cosyvoice_dir: str = ""  # cosyvoice: the model directory (CosyVoice2/3 weights or a random_model output)
    cosyvoice_code: str = ""  # cosyvoice: an upstream FunAudioLLM/CosyVoice checkout (needed for v3); "" = installed
    backend_options: str = ""  # "name=value,name=value": backend-specific settings, read by its factory
    device: str = "auto"  # auto, cpu or cuda[:N]
    devices: str = ""  # "cuda:0,cuda:1": one worker per device ("cpu,cpu" in tests); empty: one worker on ``device``
    dtype: str = "float32"  # float32, bfloat16 or float16
    queue_size: int = 16
    job_timeout_s: float = 300.0
    max_text_chars: int = 5000
    profile_cache_size: int = 8
    voice_renderer: str = "auto"  # voice matching/styling: dsp.RENDERERS, or auto (pulse on a GPU, world on a CPU)
    outputs_dir: str = "outputs"
    auth: str = ""  # "user:password[,user2:password2]" enables login; each login sees only what it made
    admins: str = ""  # comma-separated logins that see (and may delete) every login's History and saved voices
    history_admins: str = ""  # the older name of ``admins`` (both lists count)
    api_keys: str = ""  # the API key file (hashed keys per login); "" = <outputs>/api-keys.json
    upload_cache_max_age_min: float = 60.0  # files in Gradio's upload cache older than this are removed
    upload_cache_max_mb: float = 500.0  # past this size the oldest cached files are removed
    max_upload_mb: int = 50
    auto_clean: bool = True
    auto_clean_cached_share: float = 0.25  # clean when cached-free exceeds this share of the device
    auto_clean_cached_mib: float = 768.0  # ... or this much (a large GPU's share is never reached; HygienePolicy)
    auto_clean_fragmentation: float = 0.5
    idle_offload_minutes: float = 0.0  # 0 disables offloading an idle model
    leak_warn_mib: float = 64.0
    rss_warn_mib: float = 150.0  # warn when the worker's RSS after a job exceeds its post-warm-up level by this
    torch_threads: int = 0  # 0: PyTorch's default
    worker_wait_s: float = 300.0  # how long a queued job waits for a healthy worker before it fails
    start_retries: int = 4  # further tries (with backoff) when a new worker dies while starting
    batch_window_ms: float = 10.0  # the longest a job waits for others to share its device batch; 0: no batching
    batch_max_jobs: int = 16  # jobs per device batch
    batch_memory_mib: float = 4096.0  # the batch's summed memory estimate (text length x the backend's per-char)
    cuda_graphs: bool = True  # CUDA graphs of Piper's stages and the pulse renderer's analysis, kept where faster
    cuda_graph_mib: float = 2048.0  # capturing stops once the graphs' memory pool has grown by this much

    @property
    def outputs_path(self) -> Path:
        return Path(self.outputs_dir).resolve()

    @property
    def api_keys_path(self) -> Path:
        """The API key file: ``api_keys``, or ``api-keys.json`` in the outputs folder."""
        return Path(self.api_keys).resolve() if self.api_keys else self.outputs_path / API_KEYS_FILENAME

    @property
    def device_list(self) -> tuple[str, ...]:
        """The devices to run one worker each on: ``devices`` split at commas, else the one ``device``."""
        listed = tuple(d.strip() for d in self.devices.split(",") if d.strip())
        return listed or (self.device,)

    def for_device(self, device: str) -> Settings:
        """This worker's settings: one device, no list (a worker never spawns workers)."""
        return replace(self, device=device, devices="")

    def backend_option(self, name: str, default: str = "") -> str:
        """One "name=value" entry of ``backend_options`` (``default`` when absent)."""
        for item in self.backend_options.split(","):
            key, _, value = item.partition("=")
            if key.strip() == name:
                return value.strip()
        return default


def _coerce(kind: Any, raw: str) -> Any:
    if kind in (bool, "bool"):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw


def from_environment(base: Settings | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Apply ``VOICELAB_*`` overrides (e.g. ``VOICELAB_PORT=7861``)."""
    base = base or Settings()
    environ = dict(os.environ) if environ is None else environ
    changes: dict[str, Any] = {}
    for f in fields(Settings):
        key = f"VOICELAB_{f.name.upper()}"
        if key in environ:
            changes[f.name] = _coerce(f.type, environ[key])
    return replace(base, **changes)


# What ``--help`` says of each flag (docs/configuration.md says more).
HELP = {
    "host": "address to listen on; keep 127.0.0.1 unless --auth is set",
    "port": "port to listen on",
    "backend": "auto (kokoro on a CUDA device where installed, else builtin), builtin (English + Chinese), piper, "
    "mandarin, kokoro (fitted to each prompt), cosyvoice (optional install) or module:factory",
    "voice_path": "another Piper voice .onnx (its .onnx.json beside it)",
    "model_dir": "a model directory, for backends that load one",
    "cosyvoice_dir": "--backend cosyvoice: a CosyVoice2/3 model directory (weights or a random_model output)",
    "cosyvoice_code": "--backend cosyvoice: a checkout of FunAudioLLM/CosyVoice (upstream's inference code)",
    "backend_options": "name=value,... read by the backend; CosyVoice: fast_decode=auto|on|off, decode_slots=N, "
    "decode_kernels=auto|torch|triton, decode_sampling=auto|exact|device, flow_graphs=on|off, flow_tf32=on|off, "
    "flow_half=on|off, decode_stream=on|off, wave_slots=N",
    "device": "auto, cpu or cuda[:N] for the worker",
    "devices": "cuda:0,cuda:1,...: one worker process per device behind one queue",
    "dtype": "float32, bfloat16 or float16",
    "queue_size": "waiting jobs before the studio answers busy (HTTP 429)",
    "job_timeout_s": "a job running longer is stopped and its worker replaced",
    "max_text_chars": "longest text accepted",
    "profile_cache_size": "speaker profiles kept (least recently used evicted)",
    "voice_renderer": "voice matching and styles: pulse, torch, psola, harmonic or mel (the worker's device), world "
    "(CPU), auto (pulse on a GPU, world on a CPU)",
    "outputs_dir": "History, saved voices and Gradio's uploads; the only folder the studio serves",
    "auth": "user:password[,user2:password2]: logins for the UI; the API takes each login's keys (see --api-keys)",
    "admins": "comma-separated logins that see and may delete every login's History and saved voices",
    "history_admins": "the older name of --admins (both lists count)",
    "api_keys": "the API key file (python -m voicelab keys add LOGIN); default <outputs-dir>/api-keys.json",
    "upload_cache_max_age_min": "uploaded files older than this are removed",
    "upload_cache_max_mb": "past this size the oldest uploaded files are removed",
    "max_upload_mb": "upload limit for voice prompts",
    "auto_clean": "clean the allocator cache between jobs when the rules below say so",
    "auto_clean_cached_share": "... when cached free memory exceeds this share of the device",
    "auto_clean_cached_mib": "... or exceeds this many MiB",
    "auto_clean_fragmentation": "... or fragmentation exceeds this",
    "idle_offload_minutes": "drop an idle model from the device after this many minutes (0: never)",
    "leak_warn_mib": "allocated growth after warm-up that raises a warning on the panel",
    "rss_warn_mib": "worker RSS growth after warm-up that raises a warning on the panel",
    "torch_threads": "CPU threads for the worker (0: PyTorch's default)",
    "worker_wait_s": "how long a queued job waits for a healthy worker before it fails",
    "start_retries": "further tries, with backoff, when a new worker dies while starting",
    "batch_window_ms": "how long the oldest job waits for others to share its device batch (0: no batching)",
    "batch_max_jobs": "jobs per device batch",
    "batch_memory_mib": "a device batch's summed memory estimate",
    "cuda_graphs": "CUDA graphs of the Piper voice's stages and the pulse renderer's analysis, kept where faster",
    "cuda_graph_mib": "capturing stops once the graphs' memory pool has grown by this much",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every scalar setting, e.g. ``--queue-size 8``; defaults come from the environment."""
    defaults = Settings()
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        shown = f"; default {default}" if default not in ("", None) else ""
        text = f"{HELP[f.name]}{shown} (env VOICELAB_{f.name.upper()})".replace("%", "%%")
        parser.add_argument(flag, dest=f.name, default=None, type=functools.partial(_coerce, f.type), help=text)


def from_arguments(namespace: argparse.Namespace, base: Settings | None = None) -> Settings:
    settings = from_environment(base)
    changes = {
        f.name: getattr(namespace, f.name) for f in fields(Settings) if getattr(namespace, f.name, None) is not None
    }
    return replace(settings, **changes)
