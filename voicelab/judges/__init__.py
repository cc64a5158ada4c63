"""Judges measure what a generation sounds like; nothing in VoiceLab is ever optimised against them."""
