"""One-off investigations of single questions, run from the repository root: ``python -m tools.NAME`` (README.md)."""
