"""CosyVoice2 / CosyVoice3 through upstream's own inference code (an optional install).

``backend.py`` is the VoiceLab side (modes, chunks, prompt limits, speaker LRU); ``upstream.py`` loads
upstream's classes lazily with an explicit dtype and wraps them (worker-thread errors, generator hygiene,
streaming hop reset); ``features.py`` turns a prompt into upstream's inputs from tensors (no torchaudio.load);
``random_model.py`` writes a model directory of the real architecture with random weights. Nothing here
imports upstream at module import time, and nothing ever downloads.
"""
