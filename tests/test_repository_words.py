"""The repository speaks of the product alone: no development diary in any tracked file.

A reader meets VoiceLab, not the way it was built: no "session 7", no "issue 15", no "helper", "this turn" or
"sitting", no numbered GPU runs ("the eleventh GPU run") and no path of the machine a figure was taken on
(``/work/...``, ``/tmp/...``, ``../shared``). A figure says when (a date) and on what (a machine, a version).

Checked: every tracked text file; in Python files only what a reader reads (comments and string literals,
docstrings, help and UI text), so a variable named ``session`` holding an ONNX Runtime session is code, not
prose; and test function names. "session" stays where it is a technical term (a browser, Gradio or ONNX Runtime
session, a session cookie, pytest's ``scope="session"``): ``ALLOWED`` is that list, and the few paths that are
fixtures or throwaway recipes rather than a machine's.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()
BINARY = (".png", ".jpg", ".wav", ".flac", ".mp3", ".ogg", ".opus", ".npz", ".npy", ".pt", ".onnx", ".bin", ".tflite")

FORBIDDEN = {
    "session": re.compile(r"\bsessions?\b", re.IGNORECASE),
    "issue N": re.compile(r"\bissues?\s*#?\s*\d|\bissue's\b", re.IGNORECASE),
    "helper": re.compile(r"\bhelpers?\b", re.IGNORECASE),
    "this turn": re.compile(r"\bthis turn\b", re.IGNORECASE),
    "sitting": re.compile(r"\bsitting\b", re.IGNORECASE),
    "numbered GPU run": re.compile(r"\b(?:first|second|third|\w+th)\s+GPU\s+runs?\b", re.IGNORECASE),
    "machine path": re.compile(r"/work/|/tmp/|/root/|\.\./shared\b"),
}

ALLOWED = (
    # "session" as a technical term.
    re.compile(r"\b(?:browser|Gradio|gradio_client`*|login|HTTP|ONNX|onnxruntime|ONNX Runtime)\s+sessions?\b", re.I),
    re.compile(r"\bsession (?:cookie|hash)\b", re.IGNORECASE),
    re.compile(r"\bsession[-_.]\w+|\w+[-_]session\b", re.IGNORECASE),  # session_hash, session.intra_op..., session-a
    re.compile(r"^(['\"])session\1$"),  # pytest's scope="session"
    # Paths that are fixtures or throwaway recipes, not the machine a figure came from.
    re.compile(r"/tmp/(?:tfvenv|sbenv)\b"),  # a throwaway venv in a recipe for regenerating reference data
    re.compile(r"/tmp/gone\.bin"),  # a mapping line of a fake /proc/self/smaps
    re.compile(r"/tmp/gradio/"),  # Gradio's upload folder, as a naive app keys its uploads
    re.compile(r"^(['\"])/(?:tmp|work|root)/\1$"),  # the markers a test looks for in server messages
)

TEST_NAME = re.compile(r"^test_\w*(?:issue|session\d|helper|sitting)", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in names.splitlines() if name != THIS_FILE and not name.lower().endswith(BINARY)]


def prose_of(path: Path) -> list[tuple[int, str]]:
    """(line, text) pieces a reader reads: the whole file, or a Python file's comments and string literals."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), start=1))
    pieces = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            pieces.append((token.start[0], token.string))
    return pieces


def allowed(text: str, start: int, end: int) -> bool:
    return any(m.start() <= start and end <= m.end() for pattern in ALLOWED for m in pattern.finditer(text))


def findings(path: Path) -> list[str]:
    where = path.relative_to(REPO).as_posix()
    found = []
    for first_line, text in prose_of(path):
        for name, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                if not allowed(text, match.start(), match.end()):
                    line = first_line + text.count("\n", 0, match.start())
                    start = text.rfind("\n", 0, match.start()) + 1
                    end = text.find("\n", match.end())
                    found.append(f"{where}:{line}: {name}: {text[start : end if end >= 0 else None].strip()[:140]}")
    return found


def test_tracked_files_speak_of_the_product_not_of_its_development() -> None:
    found = [finding for path in tracked_text_files() for finding in findings(path)]
    assert not found, f"{len(found)} development words in tracked files:\n" + "\n".join(found)


def test_no_test_is_named_after_a_report_or_a_development_step() -> None:
    names = []
    for path in tracked_text_files():
        if path.suffix == ".py" and path.name.startswith("test_"):
            text = path.read_text(encoding="utf-8")
            names += [f"{path.name}: {n}" for n in re.findall(r"^\s*def (test_\w+)", text, re.M) if TEST_NAME.match(n)]
    assert not names, "tests named after a report or a step: " + ", ".join(names)


def test_the_allow_list_admits_the_technical_senses_and_nothing_else() -> None:
    def clean(text: str) -> bool:
        return not any(
            not allowed(text, m.start(), m.end()) for pattern in FORBIDDEN.values() for m in pattern.finditer(text)
        )

    assert clean("Each client is its own `gradio_client` session; a browser session; ONNX sessions; a session cookie")
    assert clean('"session"') and clean("session_hash") and clean("/tmp/tfvenv/bin/python")
    diary = ("in session 7", "this session's CPU", "issue 15's goal", "Issue #3", "a helper", "this turn", "sitting",
             "the eleventh GPU run", "--model-dir /tmp/cv2full", "/work/main/.venv", "../shared/DESIGN.md")  # fmt: skip
    for text in diary:
        assert not clean(text), text
