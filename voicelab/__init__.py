"""VoiceLab: a voice-cloning studio that keeps running."""

__version__ = "0.1.0"
