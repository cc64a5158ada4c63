"""Build the wheel kit that runs VoiceLab (studio, API server, CosyVoice) on a GPU image without internet.

    python -m tools.gpu_kit --out kit [--python 3.12] [--machine x86_64] [--part-mib 56]
        [--build-python python3.12] [--without NAME,...] [--with-cluster] [--with-onnxruntime-gpu]

On a machine that reaches PyPI: VoiceLab's pins (requirements-cosyvoice.txt over requirements.txt, and
requirements-nodeps.txt) minus what the GPU image already has (``kit_plan.IMAGE_PACKAGES``), with every dependency
walked for the target's Python and platform, as wheels; the three pins that exist only as source for CPython 3.12
(openai-whisper, antlr4-python3-runtime, pyworld) built into wheels in a build venv of the target's Python with
``setuptools<70`` and ``--no-build-isolation`` (antlr4's setup script imports pkg_resources). The wheels are packed
into ``kit/part1``, ``kit/part2``, ... of at most ``--part-mib`` each, so that each part travels in one carried
folder beside the code; ``kit/MANIFEST.txt`` lists each part, what the image provides instead, what was left out and
why, and the install command. Without a build Python for the target, the sources go into the kit instead and the
manifest gives the command that builds them on the GPU machine (which has compilers). ``--with-cluster`` adds
requirements-dev.txt's ``ray[serve]`` pin (``serve --ray``) and packs what only it needs into parts of their own;
``--with-onnxruntime-gpu`` adds onnxruntime's CUDA build (``kit_plan.ONNXRUNTIME_GPU``) in parts of its own, for a
new CosyVoice voice's speech tokenizer on the GPU.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from tools.kit_plan import (
    BUILT_FROM_SOURCE,
    CLUSTER,
    GROUPS,
    LEFT_OUT,
    MIB,
    ONNXRUNTIME_GPU,
    Dist,
    Pin,
    Target,
    Walk,
    cluster_only,
    group_of,
    pack,
    pieces_of,
    read_pins,
    walk,
    wanted,
    whole_name,
)

ROOT = Path(__file__).resolve().parents[1]
BUILD_NEEDS = ("setuptools<70", "wheel", "cython", "numpy>=2")
SITE = "~/voicelab-site"  # where install puts the kit (next to the image's own packages, on PYTHONPATH)


def wheel_dist(path: Path) -> Dist:
    """A wheel's name, version and Requires-Dist, read from its METADATA."""
    name, version, _, _ = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(archive.read(meta).decode("utf-8", "replace"))
    return Dist(
        canonicalize_name(name),
        str(version),
        tuple(headers.get_all("Requires-Dist") or ()),
        path.name,
        path.stat().st_size,
    )


class PipFetch:
    """``kit_plan.Fetch`` through ``pip download --no-deps --only-binary=:all:`` for the target, into ``folder``."""

    def __init__(self, folder: Path, target: Target, pip: Sequence[str]) -> None:
        self.folder, self.target, self.pip = folder, target, list(pip)

    def __call__(self, requirements: list[str]) -> list[Dist]:
        if not requirements:
            return []
        before = set(self.folder.glob("*.whl"))
        platforms = [arg for tag in self.target.platform_tags() for arg in ("--platform", tag)]
        command = [
            *self.pip,
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            self.target.python,
            "--implementation",
            "cp",
            "--abi",
            self.target.abi,
            *platforms,
            "-d",
            str(self.folder),
            *requirements,
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wanted_names = {canonicalize_name(Requirement(r).name) for r in requirements}
        return [
            wheel_dist(p)
            for p in sorted(set(self.folder.glob("*.whl")) - before)
            if canonicalize_name(parse_wheel_filename(p.name)[0]) in wanted_names
        ]


def build_python(asked: str, target: Target) -> str | None:
    """The interpreter that builds the source-only pins: ``asked``, else ``pythonX.Y`` on PATH, else pyenv's."""
    for candidate in [asked, f"python{target.python}"]:
        if candidate and shutil.which(candidate):
            probe = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
            )
            if probe.returncode == 0 and probe.stdout.strip() == target.python:
                return shutil.which(candidate)
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{target.python}*/bin/python{target.python}"))
    return str(pyenv[-1]) if pyenv else None


def build_sources(specs: list[str], into: Path, python: str | None, pip: Sequence[str]) -> list[str]:
    """Wheels of the source-only pins built with ``python`` into ``into``; without one, their sdists into the kit's
    ``src`` folder (beside ``into``) and the manifest line that builds them on the GPU machine. Returns that line."""
    if python is None:
        src = into.parent / "src"
        src.mkdir(exist_ok=True)
        subprocess.run([*pip, "download", "--no-deps", "--no-binary=:all:", "-d", str(src), *specs], check=True)
        kit = into.parent.name
        return [
            f"build on the GPU machine first (it has compilers; carry {kit}/src too): python3 -m pip wheel --no-deps "
            f"--no-build-isolation -w {kit}/built {kit}/src/*, then install {kit}/built with the parts"
        ]
    with tempfile.TemporaryDirectory(prefix="voicelab-kit-build-") as scratch:
        venv = Path(scratch) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        vpip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*vpip, "install", *BUILD_NEEDS], check=True)
        subprocess.run([*vpip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(into), *specs], check=True)
    return []


def write_parts(folder: Path, out: Path, budget: int, cluster: frozenset[str] = frozenset()) -> list[list[str]]:
    """The wheels of ``folder`` moved into ``out/partN`` folders of at most ``budget`` bytes each, group by group
    (``GROUPS``, core first, the cluster's last); a wheel over the budget as pieces (joined again by ``install``)."""
    parts: list[list[str]] = []
    for group in ("core", *(title for title, _ in GROUPS), CLUSTER):
        sizes: dict[str, int] = {}
        for wheel in sorted(folder.glob("*.whl")):
            if group_of(parse_wheel_filename(wheel.name)[0], cluster) == group:
                sizes.update(pieces_of(wheel.name, wheel.stat().st_size, budget))
        parts += pack(sizes, budget)
    for number, files in enumerate(parts, start=1):
        part = out / f"part{number}"
        part.mkdir(parents=True, exist_ok=True)
        for name in files:
            split = whole_name(name)
            if split is None:
                shutil.move(str(folder / name), part / name)
                continue
            with open(folder / split[0], "rb") as source:
                source.seek((split[1] - 1) * budget)
                (part / name).write_bytes(source.read(budget))
    for wheel in folder.glob("*.whl"):
        wheel.unlink()  # the split ones, now in pieces
    return parts


def install(folders: Sequence[Path], target: Path) -> list[str]:
    """On the GPU machine: the wheels of ``folders`` (pieces joined in order) installed into ``target`` with
    ``--no-index --no-deps``; returns the files still missing a piece (another part brings it)."""
    pieces: dict[str, dict[int, Path]] = {}
    counts: dict[str, int] = {}
    wheels = [w for f in folders for w in sorted(f.glob("*.whl"))]
    for path in (p for f in folders for p in sorted(f.glob("*.whl.piece*"))):
        split = whole_name(path.name)
        if split is not None:
            pieces.setdefault(split[0], {})[split[1]] = path
            counts[split[0]] = split[2]
    missing = []
    with tempfile.TemporaryDirectory(prefix="voicelab-kit-join-") as scratch:
        for name, found in sorted(pieces.items()):
            if len(found) != counts[name]:
                missing.append(f"{name} ({len(found)} of {counts[name]} pieces)")
                continue
            joined = Path(scratch) / name
            with open(joined, "wb") as out:
                for index in sorted(found):
                    out.write(found[index].read_bytes())
            wheels.append(joined)
        if wheels:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                            "--upgrade", "--target", str(target), *map(str, wheels)], check=True)  # fmt: skip
    return missing


def manifest(
    out: Path,
    parts: list[list[str]],
    result: Walk,
    from_image: list[str],
    notes: list[str],
    cluster: frozenset[str] = frozenset(),
    left_out: Mapping[str, str] = LEFT_OUT,
) -> str:
    lines = [f"VoiceLab GPU kit: {len(result.chosen)} wheels in {len(parts)} parts"]
    for number, files in enumerate(parts, start=1):
        size = sum((out / f"part{number}" / f).stat().st_size for f in files)
        group = _group_of_file(files[0], cluster)
        lines.append(f"part{number} ({group}): {len(files)} files, {size / MIB:.1f} MiB: {' '.join(files)}")
    lines.append(f"from the image (pins left to its own version): {' '.join(from_image)}")
    lines += [f"left out: {name}: {why}" for name, why in sorted(left_out.items())]
    lines += [f"conflict: {problem}" for problem in result.problems]
    lines += notes
    lines.append("core: app.py, the API server and CosyVoice on its built-in voice; the English voice adds the")
    lines.append("built-in backend's English; voice matching and the judge add cloning on the built-in voices and")
    lines.append("prompts' scores; the cluster parts (--with-cluster) add Ray Serve for serve --ray. Carry the parts")
    lines.append("a run needs (one a call works while the machine stays warm), then:")
    lines.append(f"mkdir -p ~/voicelab-kit && cp -r {out.name}/part* ~/voicelab-kit/  # each carried part")
    lines.append(f"python3 -m tools.gpu_kit install --target {SITE} ~/voicelab-kit/part*  # joins the pieces")
    lines.append(f"export PYTHONPATH={SITE}:$PWD")
    return "\n".join(lines) + "\n"


def _group_of_file(file: str, cluster: frozenset[str]) -> str:
    split = whole_name(file)
    return group_of(parse_wheel_filename(split[0] if split else file)[0], cluster)


def cluster_pins() -> list[Pin]:
    """requirements-dev.txt's Ray pin (``ray[serve]``): the one dev requirement a GPU run of ``serve --ray`` needs."""
    return [pin for pin in read_pins((ROOT / "requirements-dev.txt").read_text()) if pin.name == "ray"]


def build(args: argparse.Namespace) -> int:
    target = Target(python=args.python, machine=args.machine)
    left_out = dict(LEFT_OUT)
    for name in filter(None, (n.strip() for n in args.without.split(","))):
        left_out.setdefault(canonicalize_name(name), "asked to (--without)")
    files = ("requirements-cosyvoice.txt", "requirements.txt", "requirements-nodeps.txt")
    cosyvoice, runtime, nodeps = (read_pins((ROOT / f).read_text()) for f in files)
    if args.with_onnxruntime_gpu:
        left_out.pop("onnxruntime-gpu", None)
        runtime += read_pins(ONNXRUNTIME_GPU)
    one_host = wanted(cosyvoice, runtime, nodeps, left_out=left_out)
    extra = cluster_pins() if args.with_cluster else []
    pins = wanted(cosyvoice, [*runtime, *extra], nodeps, left_out=left_out)
    sources = [p.spec for p in pins.walked.values() if p.name in BUILT_FROM_SOURCE]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    if args.out.exists():
        shutil.rmtree(args.out)
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True)
    notes = build_sources(sources, wheels, build_python(args.build_python, target), pip)
    built = [wheel_dist(p) for p in wheels.glob("*.whl")]
    result = walk(pins, PipFetch(wheels, target, pip), target, given=built, left_out=left_out)
    roots = [*one_host.walked.values(), *one_host.unwalked.values()]
    cluster = cluster_only(result, roots, target) if extra else frozenset()
    parts = write_parts(wheels, args.out, int(args.part_mib * MIB), cluster)
    wheels.rmdir()
    text = manifest(args.out, parts, result, [p.name for p in pins.from_image], notes, cluster, left_out)
    (args.out / "MANIFEST.txt").write_text(text)
    print(text, end="")
    return 1 if result.problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_kit", description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", type=Path, default=Path("kit"))
    parser.add_argument("--python", default="3.12", help="the GPU image's Python (major.minor)")
    parser.add_argument("--machine", default="x86_64")
    parser.add_argument("--part-mib", type=float, default=48.0, help="budget of one part (a carried folder)")
    parser.add_argument("--build-python", default="", help="an interpreter of --python to build sdists with")
    parser.add_argument("--without", default="", help="more package names to leave out, comma-separated")
    parser.add_argument("--with-cluster", action="store_true", help="add Ray Serve (serve --ray) in parts of its own")
    ort_help = "add onnxruntime's CUDA build (a new CosyVoice voice's tokenizer) in parts of its own"
    parser.add_argument("--with-onnxruntime-gpu", action="store_true", help=ort_help)
    sub = parser.add_subparsers(dest="command")
    setup = sub.add_parser("install", help="on the GPU machine: install carried parts (pieces joined)")
    setup.add_argument("parts", type=Path, nargs="+")
    setup.add_argument("--target", type=Path, default=Path(SITE).expanduser())
    args = parser.parse_args(argv)
    if args.command != "install":
        return build(args)
    for name in install(args.parts, args.target):
        print(f"not yet installed, a piece is in another part: {name}")
    print(f"installed into {args.target}; export PYTHONPATH={args.target}:$PWD")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
