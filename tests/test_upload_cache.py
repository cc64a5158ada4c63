"""Gradio's upload cache stays bounded (age, size), loses every copy of a deleted entry, and ends with its tab."""

from __future__ import annotations

import os
import time
from pathlib import Path

from voicelab.settings import Settings
from voicelab.ui.cache import RECENT_S, UploadCache
from voicelab.ui.serving import cache_cleanup

MIB = 2**20


def put(root: Path, name: str, size: int, age_s: float) -> Path:
    path = root / os.urandom(8).hex() / name
    path.parent.mkdir(parents=True)
    path.write_bytes(os.urandom(size))
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_files_past_the_age_bound_go_and_their_folders_with_them(tmp_path: Path) -> None:
    cache = UploadCache(tmp_path, max_age_s=3600, max_bytes=100 * MIB)
    old, new = put(tmp_path, "old.wav", 1000, 7200), put(tmp_path, "new.wav", 1000, 10)
    report = cache.prune()
    assert report.removed == 1 and report.freed_bytes == 1000
    assert not old.exists() and not old.parent.exists() and new.exists()


def test_past_the_size_bound_the_oldest_go_first_but_never_the_newest(tmp_path: Path) -> None:
    cache = UploadCache(tmp_path, max_age_s=10**6, max_bytes=3 * MIB)
    files = [put(tmp_path, f"{i}.wav", MIB, 1000 - i * 100) for i in range(5)]  # 0 is the oldest
    fresh = put(tmp_path, "fresh.wav", MIB, RECENT_S / 2)
    cache.prune()
    assert [f.exists() for f in files] == [False, False, False, True, True] and fresh.exists()
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) == 3 * MIB


def test_deleting_an_entry_removes_copies_by_name_and_by_content(tmp_path: Path) -> None:
    cache = UploadCache(tmp_path, max_age_s=10**6, max_bytes=100 * MIB)
    wav = put(tmp_path, "20261201-120000-0123456789ab.wav", 2000, 5)
    srt = put(tmp_path, "0123456789ab.srt", 40, 5)
    renamed = put(tmp_path, "prompt-copy.wav", 10, 5)
    renamed.write_bytes(wav.read_bytes())  # the same audio under another name ("use as prompt")
    other = put(tmp_path, "20261201-120001-ffffffffffff.wav", 2000, 5)
    removed = cache.remove_copies(("20261201-120000-0123456789ab", "0123456789ab"), wav.read_bytes())
    assert removed == 3 and not wav.exists() and not srt.exists() and not renamed.exists() and other.exists()


def test_a_sessions_prompts_go_when_it_ends_and_links_are_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "cache", tmp_path / "keep.wav"
    root.mkdir()
    outside.write_bytes(b"not the cache's")
    cache = UploadCache(root, max_age_s=0, max_bytes=0)
    prompt, kept = put(root, "prompt.wav", 100, 0), put(root, "other-session.wav", 100, 0)
    cache.remember_prompt("session-a", prompt)
    cache.remember_prompt("session-b", kept)
    cache.remember_prompt("session-a", outside)  # outside the cache: never remembered
    (root / "link.wav").symlink_to(outside)
    assert cache.end_session("session-a") == 1 and not prompt.exists() and kept.exists()
    cache.prune(now=time.time() + 10**6)
    assert outside.read_bytes() == b"not the cache's" and (root / "link.wav").is_symlink()


def test_gradios_own_cleanup_follows_the_age_setting() -> None:
    assert cache_cleanup(Settings(upload_cache_max_age_min=10)) == (600, 600)
    assert cache_cleanup(Settings(upload_cache_max_age_min=24 * 60)) == (3600, 86400)
