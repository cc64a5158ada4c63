"""Parity of our PyTorch Kokoro with the int8 ONNX graph run by onnxruntime, on the same phonemes and voice.

The graph quantises activations on the fly, so numbers differ slightly everywhere; the harmonic source then
integrates F0 into phase, so a few Hz of F0 difference shifts the waveform's phase over a sentence. Parity is
therefore stated stage by stage: durations, the F0 and energy curves, and the waveform decoded from the
reference's own durations and curves (and a log spectrogram of the whole output, which is phase-blind).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from voicelab.backends.kokoro.config import SAMPLES_PER_FRAME
from voicelab.backends.kokoro.model import KokoroModel

CURVES = ("/encoder/Clip_output_0", "/encoder/Squeeze_output_0", "/encoder/Squeeze_1_output_0")


@dataclass(frozen=True)
class Agreement:
    """Pearson correlation and largest absolute difference of ours against the reference."""

    correlation: float
    max_error: float

    @staticmethod
    def of(ours: np.ndarray | torch.Tensor, reference: np.ndarray) -> Agreement:
        a = np.asarray(ours, dtype=np.float64).ravel()
        b = np.asarray(reference, dtype=np.float64).ravel()
        n = min(len(a), len(b))
        return Agreement(float(np.corrcoef(a[:n], b[:n])[0, 1]), float(np.abs(a[:n] - b[:n]).max()))


@dataclass(frozen=True)
class ParityReport:
    """Per stage: durations (frames), F0 (Hz), energy, the waveform decoded from the reference's curves, and the
    log spectrogram of our whole output on the reference's durations."""

    frames: Agreement
    f0: Agreement
    energy: Agreement
    waveform: Agreement
    log_spectrogram: Agreement
    samples: tuple[int, int]  # the whole output's length, ours and the reference's (each with its own durations)


def reference_session(model_bytes: bytes) -> object:
    """An onnxruntime session over the graph that also returns durations and curves."""
    import onnx
    import onnxruntime

    graph = onnx.load_from_string(model_bytes)
    for name in CURVES:
        graph.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])


def log_spectrogram(audio: np.ndarray) -> np.ndarray:
    from scipy.signal import stft

    return np.log(np.abs(stft(np.asarray(audio, dtype=np.float64), nperseg=1024)[2]) + 1e-5)


def compare(model: KokoroModel, session: object, ids: list[int], style: np.ndarray) -> ParityReport:
    """Both runtimes on tokens ``[0, *ids, 0]`` and style [256]."""
    tokens = np.array([[0, *ids, 0]], dtype=np.int64)
    feeds = {"tokens": tokens, "style": style.reshape(1, 256).astype(np.float32), "speed": np.ones(1, np.float32)}
    wave, frames, f0, energy = session.run(None, feeds)  # type: ignore[attr-defined]
    device = next(model.parameters()).device
    ref_s = torch.from_numpy(feeds["style"]).to(device)
    with torch.inference_mode():
        ours_frames = model.align(torch.from_numpy(tokens).to(device), ref_s).frames
        fixed = torch.from_numpy(frames.ravel().astype(np.int64)).to(device)
        alignment = model.align(torch.from_numpy(tokens).to(device), ref_s, frames=fixed)
        whole = model.render(alignment, ref_s).cpu().numpy()  # all ours but the rounding of durations
        our_f0, our_energy = model.predictor.curves(alignment.prosody_features, ref_s[:, 128:])
        curves = (torch.from_numpy(f0).reshape(1, -1).to(device), torch.from_numpy(energy).reshape(1, -1).to(device))
        decoded = model.decoder(alignment.asr, *curves, ref_s[:, :128])[0].cpu().numpy()
    return ParityReport(
        frames=Agreement.of(ours_frames.cpu().numpy(), frames),
        f0=Agreement.of(our_f0.cpu().numpy(), f0),
        energy=Agreement.of(our_energy.cpu().numpy(), energy),
        waveform=Agreement.of(decoded, wave),
        log_spectrogram=Agreement.of(log_spectrogram(whole), log_spectrogram(wave.ravel())),
        samples=(int(ours_frames.sum()) * SAMPLES_PER_FRAME, int(wave.size)),
    )
