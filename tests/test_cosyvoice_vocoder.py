"""The vocoders as the graphs run them, against upstream's own ``inference`` on the CPU: CosyVoice2's HiFT and
CosyVoice3's causal HiFT (``causal_vocoder.causal_vocode``, its first chunk: the fixed phases and noise read from
device copies, the same audio).

``vocoder_graphs.vocode`` is what each CUDA graph captures: upstream's inference with its random draws made outside
(``draw``) and the sync-free transforms (``hift_stft``). From the same seed it must give upstream's audio and source;
``streamed_shapes`` must list every vocoder input of a streamed request but its last chunk, as upstream's own
``token2wav`` makes them. Needs the optional CosyVoice install and an upstream checkout (``fixture_cosyvoice_llm``):
every test here skips in CI and the default .venv (the GPU tests are in test_cosyvoice_vocoder_gpu.py).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixture_cosyvoice_llm import require_upstream

torch = pytest.importorskip("torch")
DATA = Path(__file__).parent / "data"
TEXT = "The old lighthouse keeper climbed the spiral stairs every evening at dusk, and he sang."


def cosyvoice2_hift(seed: int = 0) -> Any:
    """Upstream's HiFT as CosyVoice2's hyperparameter file builds it (full size), random weights, eval mode."""
    require_upstream()
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.random_yaml import COMMON, HIFT

    text = COMMON + HIFT.format(hift_class="HiFTGenerator", hift_extra="", f0_class="ConvRNNF0Predictor")
    torch.manual_seed(seed)
    return load_hyperpyyaml(io.StringIO(text))["hift"].eval()


@pytest.mark.parametrize(("frames", "cached"), [(50, 0), (96, 0), (108, 3840)])
def test_the_graphed_vocoder_call_gives_upstreams_audio_from_the_same_seed(frames: int, cached: int) -> None:
    from voicelab.backends.cosyvoice.hift_stft import make_sync_free
    from voicelab.backends.cosyvoice.vocoder_graphs import draw, vocode

    hift = cosyvoice2_hift()
    gen = torch.Generator().manual_seed(frames)
    feat = torch.randn(1, 80, frames, generator=gen)
    cache = 0.1 * torch.randn(1, 1, cached, generator=gen)
    torch.manual_seed(11)
    expected_speech, expected_source = hift.inference(speech_feat=feat, cache_source=cache)
    make_sync_free(hift)
    torch.manual_seed(11)
    with torch.inference_mode():
        draws = draw(hift, frames, torch.device("cpu"))
        speech, source = vocode(hift, feat, cache, draws.phase, draws.sine_noise)
    assert torch.equal(source, expected_source)  # the draws are upstream's, number for number
    assert speech.shape == expected_speech.shape == (1, frames * 480)
    assert float((speech - expected_speech).abs().max()) <= 1e-5 * float(expected_speech.abs().max())
    assert float(expected_speech.std()) > 1e-3  # audio, not silence


def test_the_next_seed_gives_other_noise_so_the_draws_are_not_fixed() -> None:
    from voicelab.backends.cosyvoice.vocoder_graphs import draw

    hift = cosyvoice2_hift()
    torch.manual_seed(1)
    first = draw(hift, 50, torch.device("cpu"))
    second = draw(hift, 50, torch.device("cpu"))
    assert first.phase[0, 0] == 0 and not torch.equal(first.phase, second.phase)
    assert first.sine_noise.shape == (1, 50 * 480, 9) and not torch.equal(first.sine_noise, second.sine_noise)


def test_off_cuda_nothing_is_installed_and_the_stand_in_is_upstreams_call() -> None:
    from voicelab.backends.cosyvoice.speech_loop import Hops
    from voicelab.backends.cosyvoice.vocoder_graphs import GraphedVocoder, install_vocoder_graphs

    hift = cosyvoice2_hift()
    model = type("Model", (), {"hift": hift})()
    assert install_vocoder_graphs(model, Hops(25, 100, 2, 3)) is None
    graphed = GraphedVocoder(hift, [(50, 0)])
    feat = torch.randn(1, 80, 50)
    torch.manual_seed(3)
    expected, _ = hift.inference(speech_feat=feat)
    torch.manual_seed(3)
    got, _ = graphed.inference(feat)
    assert torch.equal(got, expected) and graphed.release() == 0 and graphed.reports == []


def test_streamed_shapes_are_every_chunk_but_the_last_of_a_real_streamed_request(tmp_path: Path) -> None:
    """The tiny random CosyVoice2 through upstream's ``token2wav`` (our speech loop), streamed, its LLM replaced by
    330 fixed tokens (a random LLM's length is its own): the vocoder's inputs are the listed shapes, the last chunk's
    aside; and the list has one first-chunk shape per prompt pad, then the later hops'."""
    from voicelab.backends.cosyvoice.random_model import write_model
    from voicelab.backends.cosyvoice.upstream import load_runtime
    from voicelab.backends.cosyvoice.vocoder_graphs import streamed_shapes

    code = str(require_upstream())
    runtime = load_runtime(write_model(tmp_path / "cv2", 2, tiny=True), code, "cpu", "float32", None)
    model = runtime.model
    listed = streamed_shapes(runtime.hops, model.flow.token_mel_ratio, model.mel_cache_len, model.source_cache_len)
    assert len(listed) == len(set(listed)) == runtime.hops.first + 2  # 25 pads, then hops of 50 and 100 tokens
    seen: list[tuple[int, int]] = []
    upstream = model.hift.inference

    def spy(speech_feat: Any, cache_source: Any = None) -> Any:
        cache_source = torch.zeros(1, 1, 0) if cache_source is None else cache_source
        seen.append((int(speech_feat.shape[2]), int(cache_source.shape[2])))
        return upstream(speech_feat=speech_feat, cache_source=cache_source)

    model.hift.inference = spy
    chunks = streamed_request(runtime, 330)
    assert len(chunks) == len(seen) >= 4
    assert all(shape in listed for shape in seen[:-1]), seen
    assert seen[0][1] == 0 and all(cached == model.source_cache_len for _, cached in seen[1:])


def streamed_request(runtime: Any, tokens: int) -> list[np.ndarray]:
    """One streamed zero-shot request (the slt prompt) whose LLM is replaced by ``tokens`` fixed speech tokens (a
    random LLM's length is its own), through upstream's ``token2wav`` and our speech loop."""
    import soundfile as sf

    from voicelab.backends.cosyvoice.modes import Mode, ModePlan
    from voicelab.voice.analysis import resample

    model = runtime.model
    fixed = torch.randint(0, 6561, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()

    def llm_job(text: Any, prompt_text: Any, prompt_speech: Any, embedding: Any, key: str) -> None:
        model.tts_speech_token_dict[key].extend(fixed)
        model.llm_end_dict[key] = True

    model.llm_job = llm_job
    audio, rate = sf.read(DATA / "arctic_slt_en_female.wav", dtype="float32")
    entry = runtime.speaker(resample(np.asarray(audio), rate, 16000))
    plan = ModePlan(Mode.ZERO_SHOT, (DATA / "arctic_slt_en_female.txt").read_text().strip())
    return list(runtime.run(runtime.inputs(plan, TEXT, entry), stream=True, speed=1.0, seed=1))


def cosyvoice3_hift(seed: int = 0) -> Any:
    """Upstream's causal HiFT as CosyVoice3's hyperparameter file builds it (full size), random weights, eval mode."""
    require_upstream()
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.random_yaml import COMMON, HIFT

    extra = "    conv_pre_look_right: 4\n"
    text = COMMON + HIFT.format(hift_class="CausalHiFTGenerator", hift_extra=extra, f0_class="CausalConvRNNF0Predictor")
    torch.manual_seed(seed)
    return load_hyperpyyaml(io.StringIO(text))["hift"].eval()


def test_cosyvoice3s_causal_vocoder_gives_the_same_audio_with_the_sync_free_transforms() -> None:
    """CosyVoice3's causal HiFT runs with the same transforms: its audio, whole and as a streamed (unfinalised)
    chunk, equals upstream's own STFTs' within 1e-5."""
    from voicelab.backends.cosyvoice.hift_stft import make_sync_free

    hift = cosyvoice3_hift()
    feat = torch.randn(1, 80, 90, generator=torch.Generator().manual_seed(4))
    expected = [hift.inference(speech_feat=feat, finalize=f)[0] for f in (True, False)]
    make_sync_free(hift)
    for finalize, reference in zip((True, False), expected, strict=True):
        got = hift.inference(speech_feat=feat, finalize=finalize)[0]
        assert got.shape == reference.shape
        assert float((got - reference).abs().max()) <= 1e-5 * float(reference.abs().max()), finalize


@pytest.mark.parametrize("frames", [50, 96])
def test_the_graphed_causal_vocoder_call_gives_upstreams_first_chunk(frames: int) -> None:
    """``causal_vocode`` (what CosyVoice3's first-chunk graphs capture) with the recipe's device copies of the fixed
    phases and noise gives upstream's unfinalised ``inference``: the same source and the same audio; and a later
    chunk's noise is upstream's too (its slice starts at the buffer's start, whatever the length)."""
    from voicelab.backends.cosyvoice.causal_vocoder import CausalRecipe
    from voicelab.backends.cosyvoice.hift_stft import make_sync_free

    hift = cosyvoice3_hift()
    with torch.no_grad():  # random weights predict an F0 near 0 Hz, all unvoiced: lift it so the sines count
        hift.f0_predictor.classifier.bias.fill_(150.0)
    feat = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(frames))
    expected_speech, expected_source = hift.inference(speech_feat=feat, finalize=False)
    with torch.inference_mode():
        f0 = hift.f0_predictor(feat.to(torch.float64), finalize=False)
    assert float((f0 > hift.m_source.l_sin_gen.voiced_threshold).float().mean()) > 0.9  # voiced: sines in it
    make_sync_free(hift)
    recipe = CausalRecipe(hift, 98)
    with torch.inference_mode():
        speech, source = recipe.vocode(*recipe.inputs(feat, {"finalize": False}))
    assert source.shape == expected_source.shape == (1, 1, (frames - 3) * 480)
    assert float((source - expected_source).abs().max()) <= 1e-6
    assert speech.shape == expected_speech.shape
    assert float((speech - expected_speech).abs().max()) <= 1e-5 * float(expected_speech.abs().max())
    assert float(expected_speech.std()) > 1e-3


def test_the_causal_recipe_serves_unfinalised_calls_alone_and_off_cuda_installs_nothing() -> None:
    """Only streamed (unfinalised) calls of a captured length may replay; the last chunk and whole requests
    (finalised) run upstream's call; and off CUDA ``install_vocoder_graphs`` leaves CosyVoice3's vocoder alone."""
    from voicelab.backends.cosyvoice.causal_vocoder import CausalRecipe
    from voicelab.backends.cosyvoice.speech_loop import Hops
    from voicelab.backends.cosyvoice.vocoder_graphs import GraphedVocoder, first_chunk_shapes, install_vocoder_graphs

    hift = cosyvoice3_hift()
    recipe = CausalRecipe(hift, 98)
    feat = torch.zeros(1, 80, 96)
    assert recipe.shape(feat, recipe.options(finalize=False)) == (96, 0)
    assert recipe.shape(feat, recipe.options(False)) == (96, 0)
    assert recipe.shape(feat, recipe.options()) is None and recipe.shape(feat, recipe.options(finalize=True)) is None
    hops = Hops(25, 100, 2, 3)
    assert first_chunk_shapes(hops, 2) == [(50 + 2 * pad, 0) for pad in range(25)]
    assert install_vocoder_graphs(type("Model", (), {"hift": hift})(), hops) is None
    graphed = GraphedVocoder(hift, first_chunk_shapes(hops, 2), recipe)
    feat = torch.randn(1, 80, 96, generator=torch.Generator().manual_seed(2))
    expected, _ = hift.inference(speech_feat=feat, finalize=False)
    got, _ = graphed.inference(feat, finalize=False)  # nothing captured off CUDA: upstream's call
    assert torch.equal(got, expected) and graphed.release() == 0


def test_the_causal_convolutions_pad_on_the_device_with_upstreams_audio() -> None:
    """``zero_padding_on_device`` changes every causal convolution of CosyVoice3's HiFT (its F0 predictor's too)
    and upstream's own calls, whole and unfinalised, give the same audio number for number."""
    from voicelab.backends.cosyvoice.causal_vocoder import zero_padding_on_device

    hift = cosyvoice3_hift()
    causal = [m for m in hift.modules() if any(k.__name__ == "CausalConv1d" for k in type(m).__mro__)]
    feat = torch.randn(1, 80, 90, generator=torch.Generator().manual_seed(5))
    expected = [hift.inference(speech_feat=feat, finalize=f)[0] for f in (True, False)]
    assert zero_padding_on_device(hift) == len(causal) >= 50  # weight-normed ones too (a subclass of their own)
    assert all("forward" in vars(m) for m in causal)
    for finalize, reference in zip((True, False), expected, strict=True):
        assert torch.equal(hift.inference(speech_feat=feat, finalize=finalize)[0], reference), finalize
