"""Upstream CosyVoice2/3 loaded lazily with an explicit dtype, never downloading, driven by one or several requests.

``load_runtime`` builds upstream's frontend and model as its ``CosyVoice2``/``CosyVoice3`` classes would, minus
the download paths, with our featurizer for prompts, our token loop for its LLM (``decode_setup``) and CUDA graphs
for its flow estimator. ``UpstreamRuntime.run`` drives one request through upstream's ``llm_job`` and
``token2wav`` with our own loop (``speech_loop``) and guards on its thread (``request_watch``): no polling, no
per-request cache flush, the thread's errors raised as ours, early exit cleaned up, requests side by side.
"""

from __future__ import annotations

import gc
import logging
import sys
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicelab.backends.cosyvoice.batch_decode import DecodeBatcher
from voicelab.backends.cosyvoice.decode_setup import DecodeChoice, prepare_llm
from voicelab.backends.cosyvoice.features import SpeakerEntry, UpstreamFeaturizer
from voicelab.backends.cosyvoice.first_audio import FirstAudioFirst
from voicelab.backends.cosyvoice.flow_graphs import GraphedEstimator, install_flow_graphs
from voicelab.backends.cosyvoice.hift_stft import make_sync_free
from voicelab.backends.cosyvoice.modes import Mode, ModePlan
from voicelab.backends.cosyvoice.request_watch import LlmWatch, QuietGate, RequestWatches, install_guards
from voicelab.backends.cosyvoice.speech_loop import Hops, ThreadStarter, new_thread, speak
from voicelab.backends.cosyvoice.vocoder_graphs import GraphedVocoder, install_vocoder_graphs
from voicelab.errors import BackendLoadError, VoiceLabError

log = logging.getLogger(__name__)

# Imported by upstream but only for downloading: replaced in the worker by modules that refuse to run.
DOWNLOADERS = ("modelscope", "gdown", "wget")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _RefusingModule(types.ModuleType):
    """Stands in for a downloader: importing works, using anything from it raises."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise BackendLoadError(
                f"CosyVoice tried to download with {self.__name__}.{name}; VoiceLab never downloads: "
                "pass a local model directory with --cosyvoice-dir."
            )

        return refuse


def block_downloads() -> None:
    """Make ``import modelscope`` (and matcha's gdown/wget) yield a refusing stand-in in this process."""
    for name in DOWNLOADERS:
        if name not in sys.modules:
            sys.modules[name] = _RefusingModule(name)


def model_version(model_dir: Path) -> int:
    """2 or 3, from the hyperparameter file upstream's loader reads."""
    for version in (3, 2):
        if (model_dir / f"cosyvoice{version}.yaml").is_file():
            return version
    raise BackendLoadError(f"{model_dir} is not a CosyVoice2/3 model directory (no cosyvoice2.yaml or 3.yaml).")


class UpstreamRuntime:
    """One loaded upstream model: its frontend (text), our featurizer (prompts) and its model (tokens → audio).

    Built by ``load_runtime``; tests build it from test doubles of upstream's frontend and model classes.
    """

    def __init__(
        self, frontend: Any, model: Any, featurizer: Any, version: int, sample_rate: int, token_cap: int | None = None
    ) -> None:
        self.frontend, self.model, self.featurizer = frontend, model, featurizer
        self.version, self.sample_rate = version, sample_rate
        self.watches = RequestWatches()
        self.gate = QuietGate()  # flow graphs are captured again only when no request runs
        self.decoder: Any = None  # our fast decode path (``decode_setup.prepare_llm``), closed with the runtime
        self.flow_graphs: GraphedEstimator | None = None  # the flow estimator's CUDA graphs (``flow_graphs.py``)
        self.vocoder_graphs: GraphedVocoder | None = None  # the streamed chunks' vocoder graphs (``vocoder_graphs``)
        self.hops = Hops.of(model)  # read before anything runs: upstream's own tts grows the hop on the instance
        self.llm_threads: ThreadStarter = new_thread  # how each request's llm_job runs (``speech_loop``)
        self.first_audio = FirstAudioFirst()  # streamed requests' first chunks before others' later ones
        install_guards(model, self.watches, token_cap)

    def normalize(self, text: str) -> list[str]:
        """Upstream's text normalisation and sentence splitting (wetext when installed, else none)."""
        return [s for s in self.frontend.text_normalize(text, split=True, text_frontend=True) if s.strip()]

    def normalize_prompt(self, text: str) -> str:
        return str(self.frontend.text_normalize(text, split=False, text_frontend=True)) if text else ""

    def text_tokens(self, text: str) -> torch.Tensor:
        tokens, _ = self.frontend._extract_text_token(text)
        return tokens

    def speaker(self, samples: np.ndarray) -> SpeakerEntry:
        return self.featurizer.speaker(samples)

    def inputs(self, plan: ModePlan, text: str, entry: SpeakerEntry) -> dict[str, torch.Tensor]:
        """The keyword arguments of upstream's ``tts`` for one segment (as its frontend_* methods build them)."""
        model_input = {
            "text": self.text_tokens(text),
            "flow_embedding": entry.embedding,
            "llm_embedding": entry.embedding,
            "flow_prompt_speech_token": entry.speech_token,
            "prompt_speech_feat": entry.speech_feat,
        }
        if plan.mode is not Mode.CROSS_LINGUAL:
            model_input["prompt_text"] = self.text_tokens(plan.prompt_text)
        if plan.mode is Mode.ZERO_SHOT:
            model_input["llm_prompt_speech_token"] = entry.speech_token
        return model_input

    def run(
        self,
        model_input: dict[str, torch.Tensor],
        stream: bool,
        speed: float,
        seed: int | None = None,
        opens: bool = False,
    ) -> Iterator[np.ndarray]:
        """Upstream's audio for one request as float32 arrays (``speech_loop.speak``); its thread stopped and its
        per-request entries dropped however we leave. Safe to call from several threads at once. ``opens``: this
        call makes its request's first audio (``first_audio.py``)."""
        watch = LlmWatch(uuid.uuid4().hex, seed)
        self.watches.register(watch)
        try:
            with self.gate.request(self._recapture_released_graphs):
                yield from self._outputs(model_input, watch, stream, speed, opens)
        finally:
            self.watches.release(watch)

    def _outputs(
        self, model_input: dict[str, torch.Tensor], watch: LlmWatch, stream: bool, speed: float, opens: bool
    ) -> Iterator[np.ndarray]:
        order = self.first_audio
        try:
            for output in speak(
                self.model, model_input, watch, self.hops, stream, speed, self.llm_threads, order, opens
            ):
                watch.raise_if_failed()
                yield output.reshape(-1).float().numpy()
            watch.raise_if_failed()
        except VoiceLabError:
            raise
        except Exception as exc:
            watch.raise_if_failed(cause=exc)
            raise

    def _recapture_released_graphs(self) -> None:
        """Run by ``gate`` when no request is running: the flow's and the vocoder's graphs Clean cache or the OOM
        retry dropped."""
        for graphs in self.graph_sets():
            if graphs.released:
                kept = graphs.capture_all()
                log.info("%s captured again: %d kept", type(graphs).__name__, kept)

    def graph_sets(self) -> tuple[GraphedEstimator | GraphedVocoder, ...]:
        """The flow's and the vocoder's graphs, where installed (the panel lists them; Clean cache drops them)."""
        return tuple(g for g in (self.flow_graphs, self.vocoder_graphs) if g is not None)

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()
        self.decoder = self.flow_graphs = self.vocoder_graphs = None
        self.frontend = self.model = self.featurizer = None
        gc.collect()


def _add_code_dir(code_dir: str) -> None:
    if not code_dir:
        return
    path = Path(code_dir).resolve()
    if not (path / "cosyvoice" / "cli" / "model.py").is_file():
        raise BackendLoadError(f"{code_dir} is not a CosyVoice checkout (no cosyvoice/cli/model.py in it).")
    loaded = sys.modules.get("cosyvoice")
    if loaded is not None and path not in Path(str(getattr(loaded, "__file__", "") or "/")).resolve().parents:
        raise BackendLoadError(f"Another cosyvoice package is already imported in this process ({loaded.__file__}).")
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def _upstream_classes(version: int) -> tuple[Any, Any, Any]:
    try:
        from cosyvoice.cli import model as upstream_model
        from cosyvoice.cli.frontend import CosyVoiceFrontEnd
        from hyperpyyaml import load_hyperpyyaml
    except ImportError as exc:
        raise BackendLoadError(
            f"CosyVoice's optional packages are missing ({exc.name or exc}): `./run.sh --backend cosyvoice "
            "--cosyvoice-dir DIR` installs them into .venv-cosy (requirements-cosyvoice.txt; docs/cosyvoice.md)."
        ) from exc
    model_class = getattr(upstream_model, f"CosyVoice{version}Model", None)
    if model_class is None:
        raise BackendLoadError(
            f"This CosyVoice code has no CosyVoice{version}Model: point --cosyvoice-code at a checkout of "
            "FunAudioLLM/CosyVoice."
        )
    return load_hyperpyyaml, CosyVoiceFrontEnd, model_class


def load_runtime(
    model_dir: Path,
    code_dir: str,
    device: str,
    dtype: str,
    token_cap: int | None,
    decode: DecodeChoice | None = None,
    flow_graphs: bool = True,
    flow_tf32: bool = True,
    flow_half: bool = False,
    first_audio_first: bool = True,
    wave_slots: int = 0,
    vocoder_graphs: bool = True,
) -> UpstreamRuntime:
    """Upstream's classes from the optional install (or ``code_dir``), built as its CosyVoice2/3 would build them,
    except: no download path, the Qwen body cast to an explicit dtype before the weights are read (transformers 5
    loads it in its config's dtype otherwise), our featurizer instead of file-reading prompt code, and the LLM's
    token loop on our fast decode path (``decode_setup.prepare_llm``: by default on CUDA) and, on CUDA, the flow's
    estimator behind bucketed CUDA graphs (``flow_graphs.py``: each bucket kept only where faster and equal; their
    matmuls in TF32 where ``flow_tf32``, the estimator in float16 where ``flow_half``: off here, as upstream's
    float32 flow that the GPU tests compare against, on in the backend's own option), and with ``vocoder_graphs``
    the vocoder's transforms without host syncs (``hift_stft``) and CosyVoice2's streamed chunks (CosyVoice3's
    first chunk, ``causal_vocoder``) through it from CUDA graphs (``vocoder_graphs``)."""
    block_downloads()
    _add_code_dir(code_dir)
    version = model_version(model_dir)
    load_hyperpyyaml, frontend_class, model_class = _upstream_classes(version)
    if device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(device))  # upstream puts everything on the current CUDA device
    with open(model_dir / f"cosyvoice{version}.yaml") as handle:
        configs = load_hyperpyyaml(handle, overrides={"qwen_pretrain_path": str(model_dir / "CosyVoice-BlankEN")})
    configs["llm"].to(torch.float32)
    frontend = _frontend(frontend_class, configs, model_dir, version, device)
    model = model_class(configs["llm"], configs["flow"], configs["hift"], dtype == "float16")
    if not hasattr(model, "llm"):  # cosyvoice-minicpmo's copy keeps only the token-to-wave half
        raise BackendLoadError(
            "The installed cosyvoice package has no speech-token LLM (cosyvoice-minicpmo ships only the vocoder "
            "half): point --cosyvoice-code at a checkout of FunAudioLLM/CosyVoice."
        )
    model.load(str(model_dir / "llm.pt"), str(model_dir / "flow.pt"), str(model_dir / "hift.pt"))
    if dtype != "float32":
        model.llm.to(TORCH_DTYPES[dtype])
    windows_on_device(model.hift, model.device)
    _log_device_memory("weights")
    decoder = prepare_llm(model.llm, device, decode or DecodeChoice(), mask_stops=token_cap is not None)
    _log_device_memory("decode path")
    sample_rate = int(configs["sample_rate"])
    featurizer = UpstreamFeaturizer(frontend, sample_rate, model.device)
    del configs
    log.info("CosyVoice%d loaded from %s (%s, token cap %s)", version, model_dir, dtype, token_cap)
    runtime = UpstreamRuntime(frontend, model, featurizer, version, sample_rate, token_cap)
    runtime.decoder = decoder
    runtime.first_audio = FirstAudioFirst(first_audio_first, slots=wave_slots)
    _install_graphs(runtime, flow_graphs, (flow_tf32, flow_half), vocoder_graphs)
    if isinstance(decoder, DecodeBatcher):
        decoder.seed_source = runtime.watches.current_seed  # each request samples from its own seed
    return runtime


def _install_graphs(runtime: UpstreamRuntime, flow: bool, flow_precision: tuple[bool, bool], vocoder: bool) -> None:
    """The flow estimator's graphs (``flow_precision``: TF32, float16), and on CUDA the vocoder's sync-free
    transforms and streamed-chunk graphs."""
    model = runtime.model
    runtime.flow_graphs = install_flow_graphs(model.flow, *flow_precision) if flow else None
    _log_device_memory("flow graphs")
    if vocoder and torch.device(model.device).type == "cuda":
        make_sync_free(model.hift)
        runtime.vocoder_graphs = install_vocoder_graphs(model, runtime.hops)
        _log_device_memory("vocoder graphs")


def _frontend(frontend_class: Any, configs: dict[str, Any], model_dir: Path, version: int, device: str) -> Any:
    """Upstream's frontend (tokenizers, feature extractor, speaker encoder), with no speaker table (zero-shot
    speakers live in our bounded LRU). With onnxruntime-gpu installed, its CUDA libraries are loaded first from the
    NVIDIA packages torch uses, so the speech tokenizer (which asks for the CUDA provider whenever torch sees a GPU)
    gets it instead of falling back to the CPU with a warning; the log says which provider serves it."""
    if device.startswith("cuda"):
        try:
            import onnxruntime

            if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
                getattr(onnxruntime, "preload_dlls", lambda: None)()
        except Exception as exc:  # the CPU provider still serves: say why the GPU one will not
            log.warning("onnxruntime's CUDA libraries did not load (%s); the speech tokenizer runs on the CPU", exc)
    frontend = frontend_class(
        configs["get_tokenizer"],
        configs["feat_extractor"],
        str(model_dir / "campplus.onnx"),
        str(model_dir / f"speech_tokenizer_v{version}.onnx"),
        "",
        configs["allowed_special"],
    )
    tokenizer = getattr(frontend, "speech_tokenizer_session", None)
    if tokenizer is not None:
        log.info("speech tokenizer on onnxruntime %s", ", ".join(tokenizer.get_providers()))
    return frontend


def windows_on_device(vocoder: Any, device: torch.device | str) -> None:
    """Keep the vocoder's STFT window on its device. Upstream's HiFT keeps it as a plain CPU attribute (not a
    buffer, so ``model.to`` leaves it) and copies it to the device in every STFT and inverse STFT: two copies from
    pageable memory per vocoder call, each a host sync with the default stream, which on CUDA waits for every
    kernel queued there (other requests' flow and vocoder). The same values, so the same audio."""
    window = getattr(vocoder, "stft_window", None)
    if isinstance(window, torch.Tensor) and window.device != torch.device(device):
        vocoder.stft_window = window.to(device)


def _log_device_memory(stage: str) -> None:
    """Allocated and reserved CUDA memory after a load stage: where a loaded model's VRAM goes."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        log.info("after %s: %.0f MiB allocated, %.0f MiB reserved", stage, allocated / 2**20, reserved / 2**20)
