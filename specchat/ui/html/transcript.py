"""The chat transcript: rendered in the browser once, then changed only where a reply changes.

The conversation is not a ``gr.Chatbot``: the Chatbot re-renders (sanitises, parses, lays out)
every message of the conversation on every streamed update, so streaming cost grew with the
chat (0.69× the engine's speed at reply 1, 0.38× at reply 8, measured with ``specchat
bench-page``). Here the page holds one ``gr.HTML`` whose template is an empty container; its
value is a *feed*: the exchanges that changed, and a small script (:data:`TRANSCRIPT_JS`, run by
Gradio's ``js_on_load``) puts each exchange into the container and, for the reply in progress,
replaces only the Markdown blocks that differ from what it shows. Finished replies stay in the
DOM untouched.

A feed value (built by :meth:`specchat.ui.session.views.SessionViews.feed`)::

    {"seq": 12,             # per browser session, grows with every value sent
     "epoch": "9f3a61c2",   # whose seq: a new session's values count from 1 again
     "reset": false,        # true: empty the transcript first (Clear)
     "items": [             # the exchanges that changed; the others stay as they are
        {"id": 3, "user": "<div …>message</div>",
         "reply": {"label": "#3 · hybrid · …", "notices": "",
                   "blocks": ["<p>…</p>", {"head": "<div class=spec-code>…<code>", "lines": […], "tail": …}, …],
                   "status": "", "summary": "generating…", "running": true}},
        {"id": 2, "removed": true}]}

Values also carry ``"epoch"`` (whose ``seq`` it is) and, while a reply streams and no page reads
its live channel yet, ``"live"``: the path the script then reads the reply's next values from
(server-sent events, :mod:`specchat.ui.session.live`), past Gradio's event stream. A value of the
same epoch older than the last one applied is stale (the live channel runs ahead of Gradio's
stream) and skipped. Through Gradio, during one streamed reply, each value travels as a diff of
the previous one (its streaming diff), so an update carries the changed blocks only. The value is
the *state* of each exchange, not a change to it: if the browser folds two updates into one, the
later state is complete (the live channel folds the values its reader has not taken into one the
same way, every exchange they carry in its latest state: :func:`specchat.ui.session.live.fold`).

A finished reply carries its plain text too, for its copy button. "Colours / plain" and "show
rejected drafts" are classes on the container, switched in the
browser (:data:`SET_PLAIN_JS`, :data:`SET_REJECTED_JS`): they work while a reply streams and
cost no round trip. A code block's copy button copies the code without the rejected drafts.
"""

from __future__ import annotations

from specchat.ui.html.static_files import static_text

TEMPLATE = ('<div class="spec-transcript" role="log" aria-live="polite" '
            'data-placeholder="Ask for some code. Tokens appear coloured by how they were produced."></div>')

# Runs once when the component is mounted (Gradio 6 gr.HTML js_on_load: element, props, watch):
# static/transcript.js
TRANSCRIPT_JS = "\n" + static_text("transcript.js")

SET_PLAIN_JS = static_text("set_plain.js").removesuffix("\n")  # (mode) => …: the "colours / plain" switch
SET_REJECTED_JS = static_text("set_rejected.js").removesuffix("\n")  # (show) => …: "show rejected drafts"

CSS = "\n" + static_text("transcript.css")  # the transcript's CSS, part of specchat.ui.html.render.CSS


def wire(feed: dict) -> dict:
    """``feed`` as the page receives it: the exchanges keyed by id and each code block's lines
    by number, instead of lists (the script turns them back into lists).

    Why: Gradio (6.31) sends a streamed value as a diff of the last one, and its diff shifts the
    index of *every* "delete" edit met while comparing a list, those nested inside its elements
    included. When a list loses elements while lists inside it shrink in the same update (a
    reply's first update drops the reply before it, whose blocks then compare against the new
    reply's), the browser deletes the wrong elements, its copy of the value no longer matches the
    server's, the next diff fails in the browser ("Cannot create property 'head' on string") and
    the reply stops streaming. A dict's deletes carry string keys, which the diff leaves alone;
    the one list left, a reply's blocks, holds no list.
    """
    items = {}
    for item in feed["items"]:
        reply = item.get("reply")
        if reply is not None:
            blocks = [{**b, "lines": {str(i): line for i, line in enumerate(b["lines"])}} if isinstance(b, dict) else b
                      for b in reply["blocks"]]
            item = {**item, "reply": {**reply, "blocks": blocks}}
        items[str(item["id"])] = item
    return {**feed, "items": items}


def unwire(feed: dict) -> dict:
    """The inverse of :func:`wire` (for API clients and tests reading the page's value)."""
    items = list(feed["items"].values()) if isinstance(feed["items"], dict) else feed["items"]
    out = []
    for item in items:
        reply = item.get("reply")
        if reply is not None:
            blocks = [{**b, "lines": list(b["lines"].values())} if isinstance(b, dict) and isinstance(b["lines"], dict)
                      else b for b in reply["blocks"]]
            item = {**item, "reply": {**reply, "blocks": blocks}}
        out.append(item)
    return {**feed, "items": out}


def feed_messages(feed: dict) -> list[dict]:
    """A feed's exchanges as chat messages, ``[{"role": "user" | "assistant", "content": HTML}]``:
    what the page shows of each, in one HTML string per message (for API clients and tests; the
    page itself patches the parts). An item without a reply gives its user message only."""
    from html import escape

    from specchat.ui.html.markdown import block_html

    out = []
    for item in unwire({"items": feed.get("items", [])})["items"]:
        if item.get("removed"):
            continue
        out.append({"role": "user", "content": item["user"]})
        r = item.get("reply")
        if r is not None:
            body = "".join(block_html(b) for b in r["blocks"])
            out.append({"role": "assistant", "content": (
                f'<div class="spec-label">{escape(r["label"])}</div>{r["notices"]}<div class="spec-md">{body}</div>'
                f'{r["status"]}<div class="spec-summary">{escape(r["summary"])}</div>')})
    return out
