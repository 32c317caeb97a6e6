"""A worker of a slice's findings on their way to the correlator: after each telemetry
message that ended evaluation ticks, its ticks (findings and clears) go to
``<findings prefix>.<durable>`` with the ``Nats-Msg-Id`` ``<durable>:<sequence>``, and the
worker waits for the server's acknowledgements before each snapshot, so a snapshot never
covers a tick the stream lacks."""

from __future__ import annotations

import asyncio
from typing import Any

from noc_assistant.stream.fanin import Batch, TickRecorder, encode_batch

__all__ = ["Outbox"]

_IN_FLIGHT = 256


class Outbox:
    """A worker's ticks on their way to the findings stream (see the module docstring)."""

    def __init__(
        self, js: Any, stream: str, prefix: str, worker: str, recorder: TickRecorder
    ) -> None:
        self._js = js
        self._stream = stream
        self._subject = f"{prefix}.{worker}"
        self._worker = worker
        self._recorder = recorder
        self._pending: list[asyncio.Future[Any]] = []

    async def send(self, seq: int, *, final: bool = False) -> None:
        """Publish the ticks recorded since the last send, as of telemetry sequence ``seq``
        (``final``: the feed ended; sent even with no ticks)."""
        ticks = self._recorder.take()
        if not ticks and not final:
            return
        batch = Batch(self._worker, seq, int(final), ticks, final=final)
        msg_id = f"{self._worker}:{seq}" + (":final" if final else "")
        self._pending.append(
            await self._js.publish_async(
                self._subject,
                encode_batch(batch),
                stream=self._stream,
                headers={"Nats-Msg-Id": msg_id},
            )
        )
        if len(self._pending) >= _IN_FLIGHT:
            await self.confirm()

    async def confirm(self) -> None:
        """Wait until the server holds every batch sent (before a snapshot may cover them)."""
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)
