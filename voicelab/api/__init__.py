"""The HTTP API: FastAPI routes over the generation service, with the Gradio studio mounted in the same app."""
