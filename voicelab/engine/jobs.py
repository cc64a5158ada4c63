"""A submitted job: a future for its result that also streams its audio chunks as they arrive."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import Future

from voicelab.engine.messages import ChunkReady, SynthesisRequest, SynthesisResult
from voicelab.errors import JobTimeoutError


class Job(Future[SynthesisResult]):
    """``result()`` waits for the whole job; ``chunks()`` yields each piece of audio first, in order.

    A job that is run again (its worker was replaced mid-job by a forced restart) sends its chunks again from
    the start; the ones already delivered are skipped, which is exact because its seed was fixed at submission.
    """

    def __init__(self, request: SynthesisRequest) -> None:
        super().__init__()
        self.request = request
        self._chunks: queue.SimpleQueue[ChunkReady | None] = queue.SimpleQueue()
        self._delivered = 0
        self.add_done_callback(lambda _: self._chunks.put(None))

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def push(self, chunk: ChunkReady) -> None:
        """Called by the client as a chunk arrives (skipping repeats after a rerun)."""
        if chunk.index >= self._delivered:
            self._delivered = chunk.index + 1
            self._chunks.put(chunk)

    def chunks(self, timeout: float | None = None) -> Iterator[ChunkReady]:
        """Every chunk as it arrives; ends when the job does, raising its error if it failed.

        ``timeout`` bounds the wait for each next chunk (``JobTimeoutError`` past it).
        """
        while True:
            try:
                item = self._chunks.get(timeout=timeout)
            except queue.Empty as exc:
                raise JobTimeoutError("The engine did not answer in time; please try again.") from exc
            if item is None:
                self.result(0)  # raises the job's error, if any
                return
            yield item
