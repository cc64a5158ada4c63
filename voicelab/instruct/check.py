"""``StyleCheck``: what a style asked of the audio beside what was measured in it, for the result line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StyleCheck:
    """Requested vs measured, relative to the voice without the style.

    duration_x: speech duration over the voice's neutral duration for this text. The backend applies speed
        itself, so no unstyled rendering exists: the neutral duration is estimated from the voice's speaking
        rate per letter/character on a fixed sentence, which is off by up to ~15 % for a given text ("≈").
    pitch_st: median F0 change in semitones (measured against the unstyled draft, or, where the model itself
        shifted the pitch, against the voice's own median).
    loudness_db: active-speech level change (measured against the unstyled draft).
    """

    requested_duration_x: float
    measured_duration_x: float
    requested_pitch_st: float
    measured_pitch_st: float
    requested_loudness_db: float
    measured_loudness_db: float
    pitch_estimated: bool = False  # the pitch reference is the voice's usual median, not this text's draft

    def line(self) -> str:
        """One line a user reads: "duration x1.33 asked, x1.30 measured · pitch -3.0 st asked, ..."."""
        return (
            f"duration x{self.requested_duration_x:.2f} asked, ≈x{self.measured_duration_x:.2f} measured · "
            f"pitch {self.requested_pitch_st:+.1f} st asked, {'≈' if self.pitch_estimated else ''}"
            f"{self.measured_pitch_st:+.1f} st measured · "
            f"loudness {self.requested_loudness_db:+.1f} dB asked, {self.measured_loudness_db:+.1f} dB measured"
        )
