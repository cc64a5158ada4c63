"""VoiceLab on Ray Serve: engine replicas (one VoiceLab engine each) behind the same FastAPI app and studio.

``deploy`` builds and runs the application (``python -m voicelab serve --ray``); ``replica`` is the deployment
that holds one engine; ``engine`` is the ``Engine`` the ingress's ``GenerationService`` calls through a Serve
handle; ``board`` is where replicas publish their status; ``router`` sends a voice's requests to the replica
that holds its profile; ``ingress`` is the FastAPI app with the studio mounted, as one Serve deployment.
"""
