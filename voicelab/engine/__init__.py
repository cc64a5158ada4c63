"""The engine: EngineClient (UI side), EngineCore and its worker process (device side)."""
