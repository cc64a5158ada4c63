"""What a similarity figure means, in one line users read beside it (torch-free, so the UI can import it)."""

# Measured with the ECAPA judge on the dev prompts and the test clips (docs/judges.md): two parts of one recording
# (1.5-6 s each) scored 0.51-0.83, shorter parts lower; 60 pairs of different speakers scored -0.10 to 0.28.
# 0.25 is the threshold SpeechBrain's own verification uses for "the same speaker".
SIMILARITY_SCALE = (
    "Similarity by ECAPA-TDNN, a speaker-verification model the matching never sees: two recordings of the same "
    "person typically score 0.5-0.85, different people -0.1-0.3 (0.25 and above counts as the same speaker)."
)
