"""What a chat session asks the page to change (:class:`View`), and when each part is sent. No gradio import.

Every handler of a session returns a :class:`View`; ``None`` leaves a part of the page as it is.
Each field says, in its metadata, when the page sends it while a reply streams (docs/ARCHITECTURE.md,
"One chat message…"):

* :data:`STREAMED`: at once, in the reply's own stream (the transcript, the stats line, the toasts;
  Gradio rebuilds every output an update leaves alone, so the stream carries only these);
* :data:`TICKED`: kept by the session (``ChatSession.defer``) and drawn by the 3 s panel tick while
  the reply streams, and at its end;
* :data:`SETTLED`: kept by the session until the reply ends (``settle``);

and, for the panels that redraw while a reply streams only when they are on screen, which *live
panel* ("charts", "timeline", "ledger") it belongs to. The policy constants the session and the
page use (:data:`STREAMED_FIELDS`, :data:`TICKED_FIELDS`, :data:`LIVE_PANELS`,
:data:`PANEL_FIELDS`) are derived from these fields; the components each field updates are
:data:`specchat.ui.page.layout.VIEW_OUTPUTS`. A new panel is a field here and an entry there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

STREAMED = "streamed"  # sent at once, in a reply's stream
TICKED = "ticked"  # drawn by the panel tick while a reply streams (and at its end)
SETTLED = "settled"  # sent when the reply ends


def _part(when: str, panel: str | None = None, default: Any = None) -> Any:
    """A View field sent ``when`` while a reply streams, part of the live ``panel`` (or of none)."""
    return field(default=default, metadata={"when": when, "panel": panel})


@dataclass
class View:
    """What to change on the page; None leaves a part as it is.

    Attributes:
        transcript: a feed for the page's transcript (:mod:`specchat.ui.html.transcript`): the
            exchanges that changed, or everything after a reset.
        stats: the stats line (HTML) of the latest reply.
        table: the conversation table (HTML).
        figures: the four chart figures.
        textbox: text to put back in the message box (a message that was not sent).
        toasts: ``(level, text)`` pairs to show, level "info" or "warning".
        inspector / timeline / race: the token inspector, the round timeline and the race (HTML).
        trace_file: a path, the selected reply's trace file (for the download button).
        ledger / worth: the focused reply's ledger (HTML) and the α-against-c figure.
        streaming: the transcript is a streaming reply's update (the page may send it through the
            reply's live channel, :mod:`specchat.ui.session.live`, instead of Gradio's stream).
    """

    transcript: dict | None = _part(STREAMED)
    stats: str | None = _part(STREAMED)
    table: str | None = _part(TICKED)
    figures: tuple | None = _part(TICKED, "charts")
    textbox: str | None = _part(SETTLED)
    toasts: tuple[tuple[str, str], ...] = _part(STREAMED, default=())
    inspector: str | None = _part(SETTLED)
    timeline: str | None = _part(TICKED, "timeline")
    race: str | None = _part(SETTLED)
    trace_file: str | None = _part(SETTLED)  # the selected reply's trace file, for the download button
    ledger: str | None = _part(TICKED, "ledger")  # the focused reply's ledger (HTML)
    worth: Any = _part(TICKED, "ledger")  # the α-against-c figure of the conversation's drafters
    streaming: bool = field(default=False, metadata={"when": None, "panel": None})  # not a part: how to send one


def sent(when: str) -> tuple[str, ...]:
    """The View fields sent ``when`` (:data:`STREAMED`, :data:`TICKED` or :data:`SETTLED`), in field order."""
    return tuple(f.name for f in fields(View) if f.metadata["when"] == when)


STREAMED_FIELDS = sent(STREAMED)  # what a reply's stream sends the page at once (ChatSession.defer)
TICKED_FIELDS = sent(TICKED)  # what the panel tick draws while a reply streams
PANEL_FIELDS = tuple(f.name for f in fields(View) if f.metadata["panel"])  # the live panels' fields
LIVE_PANELS = tuple(dict.fromkeys(f.metadata["panel"] for f in fields(View) if f.metadata["panel"]))
"""The panels a reply redraws while it streams, each only while it is on screen: ("charts", "timeline", "ledger")."""
