"""Evaluation scripts (``python -m voicelab eval ...``): print measured tables, never assert."""
