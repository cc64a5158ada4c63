"""Speaker-profile LRU: bounded, evicts the least recently used, and gives its tensors back."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from voicelab.voice.analysis import VoiceStats
from voicelab.voice.cache import ProfileCache
from voicelab.voice.profile import SpeakerProfile


def _profile(sha: str, device: str = "cpu", size: int = 256) -> SpeakerProfile:
    stats = VoiceStats(
        f0_median_hz=120.0,
        f0_range_st=8.0,
        voiced_ratio=0.6,
        formants_hz=(500.0, 1500.0, 2500.0),
        ltas_db=(0.0,) * 18,
        loudness_dbfs=-20.0,
    )
    return SpeakerProfile(sha256=sha, embedding=torch.randn(size, device=device), stats=stats, duration_s=3.0)


def _fill(cache: ProfileCache, names: str, device: str = "cpu", size: int = 256) -> None:
    for name in names:
        cache.put(_profile(name, device, size))


def test_filling_past_capacity_evicts_the_least_recently_used() -> None:
    cache = ProfileCache(capacity=3)
    _fill(cache, "abc")
    assert cache.get("a") is not None  # a is now the most recent; b is the oldest
    _fill(cache, "d")
    assert "b" not in cache and all(k in cache for k in "acd")
    stats = cache.stats()
    assert (stats.size, stats.capacity, stats.hits, stats.misses, stats.evictions) == (3, 3, 1, 0, 1)
    assert stats.device_bytes == 3 * 256 * 4


def test_hits_misses_and_hit_rate() -> None:
    cache = ProfileCache(capacity=2)
    _fill(cache, "a")
    assert cache.get("a") is not None and cache.get("zzz") is None and cache.get("a") is not None
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (2, 1)
    assert stats.hit_rate == pytest.approx(2 / 3)
    assert ProfileCache().stats().hit_rate == 0.0


def test_put_again_replaces_and_refreshes() -> None:
    cache = ProfileCache(capacity=2)
    _fill(cache, "ab")
    cache.put(_profile("a"))  # e.g. the profile with its match result; a becomes the most recent
    _fill(cache, "c")
    assert "b" not in cache and "a" in cache and len(cache) == 2


def test_evicted_profile_tensor_is_released() -> None:
    cache = ProfileCache(capacity=2)
    _fill(cache, "a")
    embedding_ref = weakref.ref(cache.get("a").profile.embedding)  # type: ignore[union-attr]
    assert embedding_ref() is not None
    _fill(cache, "bc")
    gc.collect()
    assert embedding_ref() is None, "the evicted profile's embedding is still alive"


def test_clear_drops_everything_and_releases_tensors() -> None:
    cache = ProfileCache(capacity=4)
    _fill(cache, "ab")
    refs = [weakref.ref(cache.get(k).profile.embedding) for k in "ab"]  # type: ignore[union-attr]
    assert cache.clear() == 2 and len(cache) == 0
    gc.collect()
    assert all(r() is None for r in refs)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ProfileCache(capacity=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_eviction_returns_gpu_memory() -> None:
    size = 4 * 2**20  # 16 MiB per profile, well above allocator rounding
    cache = ProfileCache(capacity=2)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    _fill(cache, "ab", device="cuda", size=size)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before >= 2 * size * 4
    _fill(cache, "cd", device="cuda", size=size)  # evicts a and b
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before <= 2 * size * 4 + 2**20
    cache.clear()
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before <= 2**20
