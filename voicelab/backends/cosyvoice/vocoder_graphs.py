"""CosyVoice2's HiFT vocoder replayed from CUDA graphs for the streamed chunks, whose shapes recur.

A streamed request's chunks reach the vocoder in few shapes: the first chunk's mel is ``(hop + pad) * ratio`` frames
(the pad fills the prompt's last hop, so one of ``hop`` lengths per prompt), every later chunk but the last is its
hop's frames plus the vocoder's mel cache, the hop growing to its maximum. ``streamed_shapes`` lists them from the
loaded model's schedule and ``GraphedVocoder`` captures each at load. Eager, a chunk's vocoder is hundreds of small
kernels and two host syncs (the harmonic numbers copied from the host, ``torch.istft``'s envelope check); on the H200
a cached voice's first chunk spent ~35 ms there (docs/benchmarks.md), most of a streamed reply's first audio after
the flow.

What a graph cannot hold is taken out of it. The random draws (each harmonic's initial phase, the excitation's
noise, and the noise branch upstream draws and never uses) are made eagerly before each replay, on the default
generator, in upstream's order and shapes, so a replay gives the audio upstream's ``inference`` gives after the same
seed. The STFT and its inverse are ``hift_stft``'s (no sync, no cuFFT). Every other shape (whole requests, last
chunks) runs upstream's ``inference`` eagerly, with those transforms. CosyVoice3's causal vocoder gets graphs for its
streamed first chunk alone (``causal_vocoder``: its mel grows with every later chunk): ``GraphedVocoder`` takes a
recipe per vocoder, ``HiftRecipe`` here and ``CausalRecipe`` there. Each graph is compared at capture with upstream's
eager call from the same generator state and kept only where equal and faster. One lock and one event order the
replays across the callers' CUDA streams; all graphs share one memory pool."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from voicelab.backends.base import GraphBucket
from voicelab.backends.cosyvoice.causal_vocoder import CausalRecipe
from voicelab.backends.cosyvoice.flow_graphs import matmul_tf32
from voicelab.backends.cosyvoice.hift_source import Shape, harmonic_source
from voicelab.backends.cosyvoice.speech_loop import Hops
from voicelab.backends.cuda_graphs import (
    SideStream,
    capture,
    device_ms,
    restore_generator_after_failed_capture,
    warm_up,
)

log = logging.getLogger(__name__)

STAGE = "vocoder (HiFT), streamed chunk"
# Largest difference from upstream's eager call at capture, relative to the audio's scale: the transforms differ
# from cuFFT's by float32 rounding and cuDNN may pick other convolution algorithms in a capture.
TOLERANCE = 5e-3


@dataclass(frozen=True)
class Draws:
    """A vocoder call's random numbers, drawn as upstream's ``SineGen2`` and ``SourceModuleHnNSF`` draw them."""

    phase: torch.Tensor  # (1, harmonics): each harmonic's initial phase in cycles, the fundamental's 0
    sine_noise: torch.Tensor  # (1, samples, harmonics)
    unused_noise: torch.Tensor  # (1, samples, 1): upstream's noise branch, drawn and discarded


def draw(hift: Any, frames: int, device: torch.device) -> Draws:
    harmonics = int(hift.m_source.l_sin_gen.harmonic_num) + 1
    samples = frames * int(hift.f0_upsamp.scale_factor)
    phase = torch.rand(1, harmonics, device=device)
    phase[:, 0] = 0
    # Upstream draws its noise ``randn_like`` its sines, which are laid out harmonic by harmonic (a transposed
    # interpolation); a draw fills memory in order, so the same layout gives the same numbers in the same places.
    laid_out = torch.empty(1, harmonics, samples, device=device).transpose(1, 2)
    sine_noise = torch.randn_like(laid_out)
    return Draws(phase, sine_noise, torch.randn(1, samples, 1, device=device))


def vocode(hift: Any, feat: torch.Tensor, cache: torch.Tensor, phase: torch.Tensor,
           sine_noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Upstream's ``HiFTGenerator.inference`` with its draws given: the mel's F0, a sine per harmonic with its noise
    (``SineGen2``), merged by the source module's linear layer, the cached source over its start, then ``decode``."""
    f0 = hift.f0_upsamp(hift.f0_predictor(feat)[:, None]).transpose(1, 2)  # (1, samples, 1)
    source = harmonic_source(hift, f0, phase, sine_noise)
    if cache.shape[2] != 0:
        source[:, :, : cache.shape[2]] = cache
    return hift.decode(x=feat, s=source), source


def streamed_shapes(hops: Hops, token_mel_ratio: int, mel_cache: int, source_cache: int) -> list[Shape]:
    """Every vocoder input of a streamed request but its last chunk: the first chunk for each prompt pad, then each
    later hop's frames with the mel cache before them (and the cached source) until the hop stops growing."""
    shapes = first_chunk_shapes(hops, token_mel_ratio)
    hop = hops.first
    while True:
        hop = min(hops.most, int(hop * hops.scale))
        shape = (hop * token_mel_ratio + mel_cache, source_cache)
        if shape in shapes:
            return shapes
        shapes.append(shape)


class Recipe(Protocol):
    """One vocoder's part in ``GraphedVocoder``: which calls a graph serves (``shape``: None for upstream's eager
    call), a captured shape's synthetic input, the graph's inputs for a call (drawn afresh where upstream draws),
    and the call a graph captures."""

    stage: str

    def options(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def shape(self, feat: torch.Tensor, options: dict[str, Any]) -> Shape | None: ...

    def synthetic(self, shape: Shape, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]: ...

    def inputs(self, feat: torch.Tensor, options: dict[str, Any]) -> tuple[torch.Tensor, ...]: ...

    def vocode(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class HiftRecipe:
    """CosyVoice2's HiFT: a call of a captured (mel frames, cached source samples) replays; its inputs are the mel,
    the cached source and this call's draws (``draw``), made eagerly before each replay."""

    stage = STAGE

    def __init__(self, hift: Any) -> None:
        self.hift = hift
        self.device = next(hift.parameters()).device

    @staticmethod
    def options(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if args:
            kwargs["cache_source"] = args[0]
        if kwargs.get("cache_source") is None:
            kwargs["cache_source"] = torch.zeros(1, 1, 0)
        return kwargs

    @staticmethod
    def shape(feat: torch.Tensor, options: dict[str, Any]) -> Shape | None:
        return int(feat.shape[2]), int(options["cache_source"].shape[2])

    def synthetic(self, shape: Shape, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        feat = torch.randn(1, int(self.hift.conv_pre.in_channels), shape[0], device=self.device, generator=generator)
        cache = 0.1 * torch.randn(1, 1, shape[1], device=self.device, generator=generator)
        return feat, {"cache_source": cache}

    def inputs(self, feat: torch.Tensor, options: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        draws = draw(self.hift, int(feat.shape[2]), feat.device)
        return feat, options["cache_source"], draws.phase, draws.sine_noise

    def vocode(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return vocode(self.hift, *inputs)


@dataclass
class _Graph:
    inputs: tuple[torch.Tensor, ...]  # the recipe's inputs (CosyVoice2: mel, cached source, phase, sine noise)
    outputs: tuple[torch.Tensor, torch.Tensor]  # speech, source
    graph: torch.cuda.CUDAGraph


class GraphedVocoder:
    """Stands in for a HiFT's ``inference`` (``recipe``: CosyVoice2's by default): a captured shape replays, any
    other call runs upstream's."""

    def __init__(self, hift: Any, shapes: list[Shape], recipe: Recipe | None = None) -> None:
        self.hift = hift
        self.upstream: Callable[..., tuple[torch.Tensor, torch.Tensor]] = hift.inference
        self.shapes = shapes
        self.recipe: Recipe = recipe or HiftRecipe(hift)
        self.device = next(hift.parameters()).device
        self.captured: dict[Shape, _Graph] = {}
        self.reports: list[GraphBucket] = []
        self.lock = threading.Lock()
        self.replayed: Any = None  # an event after the last replay: the next waits for it, on whichever stream
        self.pool: Any = None
        self.side = SideStream()  # every shape's warm-up and capture
        self.released = False  # graphs dropped by ``release``: ``capture_all`` again when no request runs

    def inference(self, speech_feat: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        options = self.recipe.options(*args, **kwargs)
        shape = self.recipe.shape(speech_feat, options)
        entry = self.captured.get(shape) if shape is not None else None
        if entry is None or not speech_feat.is_cuda or torch.is_autocast_enabled("cuda"):
            return self.upstream(speech_feat=speech_feat, **options)
        with torch.inference_mode():
            return self._replay(entry, speech_feat, options)

    def _replay(self, entry: _Graph, feat: torch.Tensor, options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        with self.lock:
            stream = torch.cuda.current_stream(feat.device)
            if self.replayed is not None:
                stream.wait_event(self.replayed)
            outputs = self._replay_unlocked(entry, feat, options)
            self.replayed = self.replayed or torch.cuda.Event()
            self.replayed.record(stream)
        return outputs

    def capture_all(self) -> int:
        """Capture every listed shape on synthetic input (at load, or when no request runs); the number kept."""
        generator = torch.Generator(device=self.device).manual_seed(0)
        with self.lock, torch.inference_mode(), matmul_tf32(False):
            self.captured.clear()
            self.reports.clear()
            for shape in self.shapes:
                feat, options = self.recipe.synthetic(shape, generator)
                entry = self._capture(shape, feat, options)
                if entry is not None:
                    self.captured[shape] = entry
            self.released = False
        return len(self.captured)

    def release(self) -> int:
        """Drop every graph (their pool becomes freeable) until the next ``capture_all``."""
        with self.lock:
            dropped = len(self.captured)
            self.captured.clear()
            self.reports.clear()
            self.pool, self.replayed = None, None
            self.released = True
        return dropped

    def _capture(self, shape: Shape, feat: torch.Tensor, options: dict[str, Any]) -> _Graph | None:
        allocated = torch.cuda.memory_allocated()
        static = self.recipe.inputs(feat, options)
        call = functools.partial(self.recipe.vocode, *static)
        stage, (frames, cached) = self.recipe.stage, shape
        try:
            warm_up(call, self.side)
            graph, outputs = capture(call, self.pool, self.side)
            self.pool = graph.pool()
        except RuntimeError as exc:  # a kernel that cannot be captured: this shape stays eager
            log.warning("%s graph for %d frames not captured: %s", stage, frames, exc)
            restore_generator_after_failed_capture()
            return None
        entry = _Graph(static, outputs, graph)
        equal = self._same_as_upstream(entry, feat, options)
        eager_ms = device_ms(lambda: self.upstream(speech_feat=feat, **options))
        graph_ms = device_ms(lambda: self._replay_unlocked(entry, feat, options))
        kept = equal and graph_ms < eager_ms
        added = torch.cuda.memory_allocated() - allocated
        self.reports.append(GraphBucket(stage, 1, frames, added, eager_ms, graph_ms, kept))
        verdict = "kept" if kept else "eager" if equal else "REJECTED: differs from upstream's"
        log.info("%s graph, %d frames (+%d cached samples): eager %.2f ms, graph %.2f ms, %s", stage, frames,
                 cached, eager_ms, graph_ms, verdict)  # fmt: skip
        return entry if kept else None

    def _replay_unlocked(
        self, entry: _Graph, feat: torch.Tensor, options: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This call's inputs made (CosyVoice2's draws), copied in, the graph replayed, its outputs copied out (the
        caller holds the lock)."""
        for static, value in zip(entry.inputs, self.recipe.inputs(feat, options), strict=True):
            static.copy_(value)
        entry.graph.replay()
        return entry.outputs[0].clone(), entry.outputs[1].clone()

    def _same_as_upstream(self, entry: _Graph, feat: torch.Tensor, options: dict[str, Any]) -> bool:
        """A replay against upstream's eager ``inference`` from the same generator state: the same audio and source
        prove the capture and that the draws are upstream's."""
        feat = feat.clone()
        options = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in options.items()}
        with torch.random.fork_rng(devices=[self.device]):
            speech, source = self._replay_unlocked(entry, feat, options)
        expected_speech, expected_source = self.upstream(speech_feat=feat, **options)
        return _close(speech, expected_speech) and _close(source, expected_source)


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    scale = float(expected.abs().max()) or 1.0
    return got.shape == expected.shape and float((got - expected).abs().max()) <= TOLERANCE * scale


def first_chunk_shapes(hops: Hops, token_mel_ratio: int) -> list[Shape]:
    """A streamed request's first vocoder input, one per prompt pad (``streamed_shapes``' first ``hops.first``)."""
    return [((hops.first + pad) * token_mel_ratio, 0) for pad in range(hops.first)]


def install_vocoder_graphs(model: Any, hops: Hops) -> GraphedVocoder | None:
    """The HiFT behind ``GraphedVocoder`` (CUDA only; None off CUDA): CosyVoice2's every streamed shape but the last
    chunk's, CosyVoice3's causal vocoder its first chunks (``causal_vocoder``); its ``inference`` replaced on the
    instance, every shape captured now."""
    hift: Any = getattr(model, "hift", None)
    kind = type(hift).__name__
    if kind not in ("HiFTGenerator", "CausalHiFTGenerator") or next(hift.parameters()).device.type != "cuda":
        return None
    ratio = int(model.flow.token_mel_ratio)
    if kind == "HiFTGenerator":
        shapes = streamed_shapes(hops, ratio, int(model.mel_cache_len), int(model.source_cache_len))
        graphed = GraphedVocoder(hift, shapes)
    else:
        shapes = first_chunk_shapes(hops, ratio)
        graphed = GraphedVocoder(hift, shapes, CausalRecipe(hift, max(frames for frames, _ in shapes)))
    kept = graphed.capture_all()
    hift.inference = graphed.inference
    torch.cuda.empty_cache()
    log.info("vocoder: %d of %d streamed chunk shapes replay from CUDA graphs", kept, len(shapes))
    return graphed
