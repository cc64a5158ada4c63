"""Launch the real studio for the browser tests through app.py's own ``serve``, with test settings.

Run as ``python -m tests.browser.serve_app --port N --outputs DIR [--backend NAME] [--backend-options K=V]``;
prints ``VOICELAB READY``
once the worker is ready and the server listens, then serves until killed.
"""

from __future__ import annotations

import argparse
import logging
import os

from app import serve
from voicelab.settings import Settings

TONE_BACKEND = "tests.fixture_backends:ToneBackend"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--outputs", required=True)
    parser.add_argument("--backend", default=TONE_BACKEND)
    parser.add_argument("--queue-size", type=int, default=4)
    parser.add_argument("--backend-options", default="")
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("VOICELAB_LOG_LEVEL", "WARNING"))
    settings = Settings(
        backend=args.backend,
        backend_options=args.backend_options,
        port=args.port,
        outputs_dir=args.outputs,
        queue_size=args.queue_size,
        max_upload_mb=5,
    )
    serve(settings, quiet=True)


if __name__ == "__main__":
    main()
