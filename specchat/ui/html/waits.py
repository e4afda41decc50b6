"""What a message's bubble says while it waits: queued behind another reply (with its own cancel
button), or read by the model in a long prefill (a progress bar, the count, an estimate)."""

from __future__ import annotations

import html

from specchat.core.events import PrefillEvent


def human_duration(seconds: float) -> str:
    """``"8 s"``, ``"2 min 5 s"``, ``"1 h 3 min"``: a wait as a reader says it (whole seconds)."""
    total = max(int(round(seconds)), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def prefill_html(event: PrefillEvent) -> str:
    """A long prefill's progress in the reply's bubble: a bar and ``Reading your message: 1,024 of
    7,761 tokens · 11 s · about 1 min 9 s left`` (the drafter's part: ``The drafter reads it
    too: …``); the estimate is the engine's (:attr:`PrefillEvent.remaining_ms`), left out until
    known; once the target has read it all, what is left is said to be the drafter's part."""
    who = "Reading your message" if event.model == "target" else "The drafter reads it too"
    left = "" if event.remaining_ms is None else f" · about {human_duration(event.remaining_ms / 1000)} left"
    if event.model == "target" and event.num_done >= event.num_total:  # what is left is the drafter's part, or nothing
        left = (f" · the drafter reads it next: about {human_duration(event.remaining_ms / 1000)}"
                if event.remaining_ms is not None and event.remaining_ms >= 500 else "")
    text = (f"{who}: {event.num_done:,} of {event.num_total:,} tokens · {human_duration(event.elapsed_ms / 1000)}"
            f"{left} · Stop cancels it")
    return (f'<div class="spec-prefill"><progress max="{event.num_total}" value="{event.num_done}"></progress>'
            f'<div class="spec-status">{html.escape(text)}</div></div>')


def queued_note_html(exchange_id: int) -> str:
    """Under a message that waits for the reply before it: "queued" and its own cancel button (a
    click writes the id into the page's hidden #spec-unqueue box, :data:`specchat.ui.page.layout.CLICK_JS`)."""
    return (f'<div class="spec-note spec-queued" title="Stop ends the streaming reply and withdraws every '
            f'queued message">queued: sent when the reply before it ends '
            f'<button type="button" class="spec-unqueue qref-{int(exchange_id)}" '
            f'title="cancel this message (the reply streaming now goes on)">cancel</button></div>')
