"""The built-in voices: English (Piper VITS) and Mandarin (FastSpeech2 + MB-MelGAN), text routed by script."""
