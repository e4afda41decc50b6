"""The route a streaming reply's text reaches the page by: ``GET /specchat/live/<key>``, server-sent
events of :class:`specchat.ui.session.live.LiveChannel` (why: that module).

Mounted on Gradio's own server through ``launch(app_kwargs=app_kwargs())`` (Gradio builds its
FastAPI app with these routes first). Each event's data is one transcript feed (JSON); the event
``end`` says the reply ended; a comment line every :data:`KEEPALIVE_S` keeps proxies from closing a
quiet stream (a long prefill). An unknown or closed key is a 404, which ends the browser's
``EventSource`` for good (it retries only a stream that broke).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from specchat.ui.session.live import LIVE, PATH, LiveChannel

KEEPALIVE_S = 15.0
POLL_S = 0.5  # how soon a reader that went away stops counting (the page's updates go back to Gradio)


async def _events(channel: LiveChannel, request: Request) -> AsyncIterator[str]:
    channel.attach()
    try:
        version, quiet = 0, 0.0
        while True:
            # the wait runs in a worker thread, abandoned (it ends by its own timeout) if the
            # client goes: the reader stops counting at once, not at the next value
            version, payload, closed = await anyio.to_thread.run_sync(channel.wait, version, POLL_S,
                                                                      abandon_on_cancel=True)
            if payload is not None:
                quiet = 0.0
                yield f"data: {payload}\n\n"
            if closed:
                yield "event: end\ndata: \n\n"
                return
            if await request.is_disconnected():
                return
            if payload is None:
                quiet += POLL_S
                if quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield ": keep-alive\n\n"
    finally:
        channel.detach()


async def live(key: str, request: Request) -> Response:
    """The live channel ``key`` as ``text/event-stream``; 404 when no reply has that key open."""
    channel = LIVE.get(key)
    if channel is None:
        return Response("no such reply streams now", status_code=404, media_type="text/plain")
    return StreamingResponse(_events(channel, request), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


ROUTES = (APIRoute("/" + PATH + "{key}", live, methods=["GET"], include_in_schema=False),)


def app_kwargs() -> dict:
    """For ``demo.launch(app_kwargs=app_kwargs())``: Gradio's FastAPI app gets the live route (Gradio
    adds its own after it). A new dict each time: Gradio writes into it."""
    return {"routes": list(ROUTES)}
