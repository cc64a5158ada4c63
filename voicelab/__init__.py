"""VoiceLab: a voice-cloning studio that keeps running."""

import os

# Idle OpenMP threads should sleep, not spin: on a small shared CPU spinning steals the cores the work needs
# (measured 2.5x slower under load). torch reads this once when it loads, so it is set on package import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
