"""The protocol every synthesis backend implements, and the typed request it receives.

A backend is handed the whole request (text, language, prompt audio and transcript, style, instruction,
speed, seed, its own options) and yields audio chunks as they are ready. It declares what it can do in
``Capabilities``; the engine adds voice matching and signal-level styling only where a backend lacks the
native ability. Torch-free, so the server process can read these types without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from voicelab.instruct.style import Style
from voicelab.voice.fitted import FittedStyle
from voicelab.voice.prompt import PromptAudio

T = TypeVar("T")


@dataclass(frozen=True)
class OptionSpec:
    """A backend-specific numeric control (e.g. Piper's noise scale), with the limits the validator enforces.

    ``default`` is shown in the UI; a request that leaves the option out gets the voice's own default.
    """

    name: str
    label: str
    low: float
    high: float
    default: float
    help: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, read by the engine (which stages to add) and the front ends (what to show).

    languages: ISO 639-1 codes it speaks ("en", "zh").
    native_cloning: it conditions on the prompt itself (no signal-level matching is added).
    native_cloning_languages: where it clones natively in some languages only (Kokoro: English; its Chinese is the
    Mandarin voice), those languages; the engine matches the others at signal level. Empty: all it speaks.
    native_instructions: it renders style and instruction itself (no DSP styling is added).
    streaming: it yields more than one chunk for long text, the first before the rest is made.
    dtypes: the dtypes ``load`` accepts. options: its own numeric controls.
    native_pitch_languages: languages in which it shifts pitch itself by ``SpeechRequest.style.pitch_semitones``
    (a model with an F0 input), so the engine leaves the style's pitch out of its DSP for those chunks.
    batching: it has ``synthesize_batch`` (``BatchedBackend``): several requests in one padded device batch.
    batch_bytes_per_char: working memory one character of text needs in a batch, for the engine's estimate of
    how many jobs fit (0: no estimate, the job-count limit alone).
    batch_split_options: options whose different values cannot share a batch (they change shapes); requests
    batch together only with equal values of these.
    concurrent_jobs: how many jobs the backend runs side by side, a new one joining while others run (its own
    batching happens below the request, as CosyVoice's shared decode step); 1: one job or micro-batch at a time.
    gendered_voice_languages: languages in which it has a voice of each gender and, without a prompt, speaks in the
    one ``SpeechRequest.style.gender`` names (Kokoro's packs); the engine then measures that voice's own pitch
    before adding an age or gender target, instead of moving the default voice there.
    """

    languages: tuple[str, ...]
    sample_rate: int
    native_cloning: bool = False
    native_instructions: bool = False
    streaming: bool = False
    dtypes: tuple[str, ...] = ("float32",)
    options: tuple[OptionSpec, ...] = ()
    native_pitch_languages: tuple[str, ...] = ()
    batching: bool = False
    batch_bytes_per_char: int = 0
    batch_split_options: tuple[str, ...] = ()
    concurrent_jobs: int = 1
    native_cloning_languages: tuple[str, ...] = ()
    gendered_voice_languages: tuple[str, ...] = ()

    def voices_gender(self, language: str) -> bool:
        """Whether the backend picks a voice of the asked gender in ``language`` (see the class docstring)."""
        return language in self.gendered_voice_languages

    def clones_natively(self, language: str) -> bool:
        """Whether the backend itself moves its voice toward the prompt in ``language``."""
        return self.native_cloning and (not self.native_cloning_languages or language in self.native_cloning_languages)

    def option(self, name: str) -> OptionSpec | None:
        return next((spec for spec in self.options if spec.name == name), None)


class FitListener(Protocol):
    """Told about a voice fit while a request waits for it (the engine relays both to the job's caller)."""

    def progress(self, step: int, total: int) -> None:
        """Step ``step`` of at most ``total`` is done (the user's "fitting voice: step 40 of 120")."""
        ...

    def fitted(self, style: FittedStyle) -> None:
        """The fit is done: ``style`` is the prompt's voice from now on (kept by the engine, and with a saved voice)."""
        ...


@dataclass(frozen=True)
class SpeechRequest:
    """What a backend is asked to say, already validated by the engine.

    text: cleaned text. language: the resolved language of this text (one of the backend's).
    speed: speaking-rate multiplier (1 = the voice's own, 2 = twice as fast); a style's speed is already in it
    when the backend lacks native instructions. seed: for every random choice the model makes.
    prompt: the voice to clone; only given to backends with native cloning.
    style / instruction: only meaningful to backends with native instructions.
    sentence_silence_s: silence between sentences, which the backend puts at the start of every chunk but the first.
    options: values for the backend's ``OptionSpec``s by name; a missing name means the voice's default.
    fitted: the prompt's voice as this backend fitted it before (a backend that fits uses it instead of fitting;
    one that does not fit, or whose vector it is not, ignores it). on_fit: told about a fit this request needs.
    """

    text: str
    language: str
    speed: float = 1.0
    seed: int = 0
    prompt: PromptAudio | None = None
    style: Style = field(default_factory=Style)
    instruction: str = ""
    sentence_silence_s: float = 0.2
    options: Mapping[str, float] = field(default_factory=dict)
    fitted: FittedStyle | None = None
    on_fit: FitListener | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AudioChunk:
    """A piece of the output, in order: float32 mono samples in [-1, 1], the text it speaks and its language."""

    audio: np.ndarray
    sample_rate: int
    text: str = ""
    language: str = ""

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(frozen=True)
class GraphBucket:
    """One captured CUDA graph shape: its stage, rows and length, the device memory its capture added, the stage's
    time eager and replayed (ms), and whether it is kept (only where the replay was faster)."""

    stage: str
    rows: int
    length: int
    bytes: int
    eager_ms: float
    graph_ms: float
    kept: bool


@dataclass(frozen=True)
class BatchEvent:
    """One step of a batched synthesis for the request at ``index`` of the batch.

    chunk: that request's next chunk (its chunks arrive in order). error: why that request failed; the others go
    on. last: the request is finished (after this event's chunk, if it has one); always set with an error.
    batch_end: True on the last event of one device batch, False while more of that batch follows, None where the
    backend does not say (the engine then voices each chunk as it comes; with it, a batch's chunks together).
    """

    index: int
    chunk: AudioChunk | None = None
    error: Exception | None = None
    last: bool = False
    batch_end: bool | None = None


class MemoryGuard(Protocol):
    """How a backend runs one device batch: the engine retries ``pieces`` after an out-of-memory error."""

    def __call__(self, full: Callable[[], T], pieces: Callable[[], T]) -> T: ...


def run_plainly(full: Callable[[], T], pieces: Callable[[], T]) -> T:
    """A MemoryGuard that just runs the full batch (calibration, tools, tests)."""
    return full()


class Backend(Protocol):
    """A model behind VoiceLab's engine; see ``voicelab.backends.registry`` for how one is added."""

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def load(self, device: str, dtype: str) -> None:
        """Read the weights and move them to ``device`` in ``dtype`` (one of ``capabilities.dtypes``)."""
        ...

    def unload(self) -> None:
        """Drop the model so its device memory can be returned."""
        ...

    def synthesize(self, request: SpeechRequest, guard: MemoryGuard = run_plainly) -> Iterator[AudioChunk]:
        """Chunks whose concatenation is the whole utterance; raises InvalidTextError if nothing can be voiced."""
        ...


class BatchedBackend(Backend, Protocol):
    """A backend that can also run several requests as one padded batch (``Capabilities.batching``)."""

    def synthesize_batch(
        self, requests: Sequence[SpeechRequest], guard: MemoryGuard = run_plainly
    ) -> Iterator[BatchEvent]:
        """Events for every request; each request's chunks equal (within float tolerance) what ``synthesize``
        yields for it alone, and one request's failure is its own ``BatchEvent.error``."""
        ...
