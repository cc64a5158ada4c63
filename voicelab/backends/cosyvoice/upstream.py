"""Upstream CosyVoice2/3 loaded lazily with an explicit dtype, never downloading, driven by one or several requests.

Upstream's ``CosyVoice2Model.tts`` starts an ``llm_job`` thread that fills a per-request dict with speech tokens
while the caller turns them into audio. Left alone, an exception in that thread is lost (the caller later fails
with a misleading vocoder error, or spins forever when streaming), a generator closed early leaves its per-request
dicts behind, and the streaming hop length grows across requests. ``UpstreamRuntime`` fixes each per instance
(no upstream module is modified): the thread's error is kept and raised as ``BackendRuntimeError``; early exit
stops the thread and drops the request's entries; the hop length is reset before every request. All of that is
per request (``RequestWatches``, a per-thread hop length), so requests may run side by side in one model.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import types
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicelab.backends.cosyvoice.batch_decode import DecodeBatcher
from voicelab.backends.cosyvoice.decode_setup import DecodeChoice, prepare_llm
from voicelab.backends.cosyvoice.features import SpeakerEntry, UpstreamFeaturizer
from voicelab.backends.cosyvoice.flow_graphs import GraphedEstimator, install_flow_graphs
from voicelab.backends.cosyvoice.modes import Mode, ModePlan
from voicelab.errors import BackendLoadError, BackendRuntimeError, VoiceLabError

log = logging.getLogger(__name__)

# Imported by upstream but only for downloading: replaced in the worker by modules that refuse to run.
DOWNLOADERS = ("modelscope", "gdown", "wget")
SESSION_DICTS = ("tts_speech_token_dict", "llm_end_dict", "hift_cache_dict", "mel_overlap_dict", "flow_cache_dict")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MIN_TOKENS, TOKENS_PER_TEXT_TOKEN = 20, 4


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


def token_limit(text_tokens: int, cap: int) -> int:
    """How many speech tokens a random-weight LLM is made to emit: clamp(4 * text tokens, 20, cap)."""
    return max(MIN_TOKENS, min(TOKENS_PER_TEXT_TOKEN * text_tokens, cap))


class LlmWatch:
    """What happened in upstream's ``llm_job`` thread for one request, and a way to stop it early.

    uuid: upstream's id for the request (its per-request dict key), learnt when the thread starts. seed: for the
    batched decoder's sampler, so a request's tokens do not depend on which requests run beside it.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self.uuid: str | None = None
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.done = threading.Event()
        self.cancel = threading.Event()

    def raise_if_failed(self, cause: BaseException | None = None) -> None:
        error = self.error
        if error is None:
            return
        if isinstance(error, torch.cuda.OutOfMemoryError | VoiceLabError):
            raise error  # the engine's OOM guard (clean, retry in pieces) or an already typed error
        message = f"CosyVoice's speech-token generator failed: {type(error).__name__}: {error}"
        raise BackendRuntimeError(message) from (cause or error)


class RequestWatches:
    """Each running request's ``LlmWatch``, so several requests can run in one model at once.

    Upstream's ``tts`` hands the ``text`` tensor we passed it, unchanged, to its ``llm_job`` thread (first
    argument; the request's uuid is the last), so that object's identity finds the request's watch. Inside the
    thread, ``current`` is that watch (the token loop and the batched decoder read it). A thread not started for
    one of ours (upstream's own callers) gets a watch of its own.
    """

    def __init__(self) -> None:
        self._by_text: dict[int, LlmWatch] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def register(self, text: torch.Tensor, watch: LlmWatch) -> None:
        with self._lock:
            self._by_text[id(text)] = watch

    def release(self, text: torch.Tensor) -> None:
        with self._lock:
            self._by_text.pop(id(text), None)

    def enter(self, text: Any, request_id: str) -> LlmWatch:
        """Called first in an ``llm_job`` thread: its request's watch, now this thread's ``current``."""
        with self._lock:
            watch = self._by_text.get(id(text)) or LlmWatch()
        watch.uuid = request_id
        self._local.watch = watch
        return watch

    def current(self) -> LlmWatch | None:
        return getattr(self._local, "watch", None)

    def current_seed(self) -> int | None:
        watch = self.current()
        return watch.seed if watch is not None else None


def install_guards(model: Any, watches: RequestWatches, token_cap: int | None) -> None:
    """Wrap this model instance's ``llm_job`` and ``llm.inference`` (and, for random weights, its sampler)."""
    original_job: Callable[..., None] = model.llm_job
    original_inference: Callable[..., Generator[int, None, None]] = model.llm.inference

    def guarded_job(*args: Any) -> None:
        request_id = args[-1]
        watch = watches.enter(args[0], request_id)
        watch.started.set()
        try:
            original_job(*args)
        except BaseException as exc:
            watch.error = exc
            log.error("upstream llm_job failed: %s: %s", type(exc).__name__, exc)
            with model.lock:
                if request_id in model.llm_end_dict:
                    model.llm_end_dict[request_id] = True  # so a streaming caller stops waiting
        finally:
            watch.done.set()

    def watched_inference(*args: Any, **kwargs: Any) -> Iterator[int]:
        text_len = kwargs.get("text_len")
        limit = token_limit(int(text_len.reshape(-1)[0]), token_cap) if token_cap and text_len is not None else None
        watch = watches.current()
        tokens = original_inference(*args, **kwargs)
        try:
            for count, token in enumerate(tokens):
                if (watch is not None and watch.cancel.is_set()) or (limit is not None and count >= limit):
                    return
                yield token
        finally:
            tokens.close()

    model.llm_job = guarded_job
    model.llm.inference = watched_inference
    if token_cap:
        _mask_stop_tokens(model.llm)


def isolate_hop_length(model: Any) -> None:
    """Give each thread its own ``token_hop_len`` on this model instance (upstream grows the attribute with every
    streamed chunk, so two streams at once would step on each other's); a thread starts at the loaded value.
    The instance's class becomes a subclass with that one property; upstream's class is untouched."""
    if "token_hop_len" not in vars(model):
        return
    initial = vars(model).pop("token_hop_len")
    local = threading.local()

    def get(self: Any) -> Any:
        return getattr(local, "value", initial)

    def put(self: Any, value: Any) -> None:
        local.value = value

    base = type(model)
    model.__class__ = type(base.__name__, (base,), {"token_hop_len": property(get, put), "__module__": base.__module__})


def _mask_stop_tokens(llm: Any) -> None:
    """Random weights never choose an end token on purpose; make sure they never do by accident either."""
    stops = list(getattr(llm, "stop_token_ids", [llm.speech_token_size]))
    original: Callable[..., int] = llm.sampling

    def sampling(scores: torch.Tensor, decoded: list[int], top_k: int) -> int:
        scores[stops] = -float("inf")
        return original(scores, decoded, top_k)

    llm.sampling = sampling


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
        self.decoder: Any = None  # our fast decode path (``decode_setup.prepare_llm``), closed with the runtime
        self.flow_graphs: GraphedEstimator | None = None  # the flow estimator's CUDA graphs (``flow_graphs.py``)
        self.hop_len: int | None = getattr(model, "token_hop_len", None)
        install_guards(model, self.watches, token_cap)
        isolate_hop_length(model)

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
        self, model_input: dict[str, torch.Tensor], stream: bool, speed: float, seed: int | None = None
    ) -> Iterator[np.ndarray]:
        """Upstream's generator as float32 arrays; closed (and its request's state dropped) however we leave.
        Safe to call from several threads at once (each request has its own watch, uuid and hop length)."""
        if self.hop_len is not None:
            self.model.token_hop_len = self.hop_len  # upstream PR #1849: it grows across requests otherwise
        watch = LlmWatch(seed)
        text = model_input["text"]
        self.watches.register(text, watch)
        outputs = self.model.tts(**model_input, stream=stream, speed=speed)
        finished = False
        try:
            for output in outputs:
                watch.raise_if_failed()
                yield output["tts_speech"].reshape(-1).float().cpu().numpy()
            finished = True
            watch.raise_if_failed()
        except VoiceLabError:
            raise
        except Exception as exc:
            watch.raise_if_failed(cause=exc)
            raise
        finally:
            self._finish(outputs, watch, finished)
            self.watches.release(text)

    def _finish(self, outputs: Any, watch: LlmWatch, finished: bool) -> None:
        if not finished:
            watch.cancel.set()
        outputs.close()
        if not finished and watch.started.is_set() and not watch.done.wait(timeout=60):
            log.warning("upstream llm_job did not stop within 60 s")
        if watch.uuid is None:
            return
        with self.model.lock:  # upstream drops these itself only when its generator runs to the end
            for name in SESSION_DICTS:
                table: dict[str, Any] = getattr(self.model, name, None) or {}
                table.pop(watch.uuid, None)

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()
        self.decoder = self.flow_graphs = None
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
            f"CosyVoice's optional packages are missing ({exc.name or exc}): install them with "
            "`.venv/bin/pip install -r requirements-cosyvoice.txt` (see README, CosyVoice)."
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
) -> UpstreamRuntime:
    """Upstream's classes from the optional install (or ``code_dir``), built as its CosyVoice2/3 would build them,
    except: no download path, the Qwen body cast to an explicit dtype before the weights are read (transformers 5
    loads it in its config's dtype otherwise), our featurizer instead of file-reading prompt code, and the LLM's
    token loop on our fast decode path (``decode_setup.prepare_llm``: by default on CUDA) and, on CUDA, the flow's
    estimator behind bucketed CUDA graphs (``flow_graphs.py``: each bucket kept only where faster and equal)."""
    block_downloads()
    _add_code_dir(code_dir)
    version = model_version(model_dir)
    load_hyperpyyaml, frontend_class, model_class = _upstream_classes(version)
    if device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(device))  # upstream puts everything on the current CUDA device
    with open(model_dir / f"cosyvoice{version}.yaml") as handle:
        configs = load_hyperpyyaml(handle, overrides={"qwen_pretrain_path": str(model_dir / "CosyVoice-BlankEN")})
    configs["llm"].to(torch.float32)
    frontend = frontend_class(
        configs["get_tokenizer"],
        configs["feat_extractor"],
        str(model_dir / "campplus.onnx"),
        str(model_dir / f"speech_tokenizer_v{version}.onnx"),
        "",  # no speaker table: zero-shot speakers live in our bounded LRU
        configs["allowed_special"],
    )
    model = model_class(configs["llm"], configs["flow"], configs["hift"], dtype == "float16")
    if not hasattr(model, "llm"):  # cosyvoice-minicpmo's copy keeps only the token-to-wave half
        raise BackendLoadError(
            "The installed cosyvoice package has no speech-token LLM (cosyvoice-minicpmo ships only the vocoder "
            "half): point --cosyvoice-code at a checkout of FunAudioLLM/CosyVoice."
        )
    model.load(str(model_dir / "llm.pt"), str(model_dir / "flow.pt"), str(model_dir / "hift.pt"))
    if dtype != "float32":
        model.llm.to(TORCH_DTYPES[dtype])
    decoder = prepare_llm(model.llm, device, decode or DecodeChoice(), mask_stops=token_cap is not None)
    sample_rate = int(configs["sample_rate"])
    featurizer = UpstreamFeaturizer(frontend, sample_rate, model.device)
    del configs
    log.info("CosyVoice%d loaded from %s (%s, token cap %s)", version, model_dir, dtype, token_cap)
    runtime = UpstreamRuntime(frontend, model, featurizer, version, sample_rate, token_cap)
    runtime.decoder = decoder
    runtime.flow_graphs = install_flow_graphs(model.flow) if flow_graphs else None
    if isinstance(decoder, DecodeBatcher):
        decoder.seed_source = runtime.watches.current_seed  # each request samples from its own seed
    return runtime
