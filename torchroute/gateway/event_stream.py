"""A streamed answer sent as it comes, stopped the moment its client goes away.

Starlette's ``StreamingResponse`` watches for the client's disconnect from a task group
(on servers of ASGI spec < 2.4, uvicorn's among them, where a write to a closed connection
is silently dropped); the group's cancel scopes cost about as much CPU per answer as the
rest of a streamed call's relay. :class:`EventStreamResponse` keeps the same behaviour
with one plain asyncio task: a listener that waits for ``http.disconnect`` and cancels the
response's own task, so a relay waiting on a stalled backend stops at once (its
``finally`` logs the try), and the cancellation it caused is absorbed here.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` of ``events`` (each item sent as it comes, in one write).

    Args:
        events: the body's pieces (bytes); closed when the response ends, whether the
            answer is complete, the client left, or the server is stopping.
        headers: extra response headers.
    """

    def __init__(self, events: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the head, each piece as it comes and the end; return early, with the
        pieces closed, when the client disconnects."""
        if sys.version_info < (3, 11):  # pragma: no cover - no Task.uncancel before 3.11
            return await super().__call__(scope, receive, send)
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def listen() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        listener = asyncio.get_running_loop().create_task(listen())
        try:
            start = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **start})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            listener.cancel()  # the answer is whole: a disconnect from here on stops nothing
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone or task.uncancel() > 0:
                raise  # not the listener's doing (the server is stopping): go on cancelling
        finally:
            listener.cancel()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()  # a relay left at a yield logs its try now, not when collected


__all__ = ["EventStreamResponse"]
