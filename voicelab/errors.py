"""Typed errors; each carries one sentence a user can read.

The worker sends errors across the process boundary by class name, so every
class a user may see is listed in ``ERROR_TYPES``.
"""

from __future__ import annotations


class VoiceLabError(Exception):
    """Base class: ``str(error)`` is the sentence shown to the user."""

    default_message = "Something went wrong while generating speech."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)

    @property
    def message(self) -> str:
        return str(self)


class InvalidTextError(VoiceLabError):
    default_message = "Please type some text to speak."


class InvalidPromptError(VoiceLabError):
    default_message = "The voice prompt could not be used."


class InvalidSettingError(VoiceLabError):
    default_message = "A setting is out of range."


class EngineBusyError(VoiceLabError):
    default_message = "The engine is busy: the queue is full. Please try again in a moment."


class JobTimeoutError(VoiceLabError):
    default_message = "Generation took too long and was stopped; the engine was restarted."


class WorkerCrashedError(VoiceLabError):
    default_message = (
        "The engine worker stopped unexpectedly while generating; it has been restarted. Please try again."
    )


class DeviceOutOfMemoryError(VoiceLabError):
    default_message = (
        "The GPU ran out of memory even after cleaning its cache and retrying in smaller pieces. Try shorter text."
    )


class BackendLoadError(VoiceLabError):
    default_message = "The voice model could not be loaded."


class BackendRuntimeError(VoiceLabError):
    default_message = "The voice model failed while generating speech."


class EngineStoppedError(VoiceLabError):
    default_message = "The engine is shutting down."


class StorageError(VoiceLabError):
    default_message = "The result could not be saved to the outputs folder."


class EngineChoiceError(VoiceLabError):
    """A voice engine that this studio cannot switch to (not installed, or not switchable here)."""

    default_message = "That voice engine cannot be chosen in this studio."


ERROR_TYPES: dict[str, type[VoiceLabError]] = {
    cls.__name__: cls
    for cls in (
        VoiceLabError,
        InvalidTextError,
        InvalidPromptError,
        InvalidSettingError,
        EngineBusyError,
        JobTimeoutError,
        WorkerCrashedError,
        DeviceOutOfMemoryError,
        BackendLoadError,
        BackendRuntimeError,
        EngineStoppedError,
        StorageError,
        EngineChoiceError,
    )
}


def error_from_name(name: str, message: str) -> VoiceLabError:
    """Rebuild an error sent by name from the worker; unknown names become the base class."""
    return ERROR_TYPES.get(name, VoiceLabError)(message)
