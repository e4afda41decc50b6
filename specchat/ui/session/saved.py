"""The conversation kept in the browser across a reload (for
:class:`~specchat.ui.session.chat.ChatSession`).

After each reply the page writes :func:`saved_state` into the browser's localStorage
(Gradio's ``BrowserState``, encrypted); a page opened or reloaded gives it back to
:func:`restore_state`: the chat shows each earlier reply as text (its events, so its
colours and charts, are not kept) and the model gets the history, so the conversation goes on.
The value comes from the browser: :func:`parse_saved` checks every field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specchat.conversation import Conversation
from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE
from specchat.ui.html.markdown import continuation_lead
from specchat.ui.html.render import reply_summary
from specchat.ui.session.reply import Exchange, Restored
from specchat.ui.session.views import SessionViews

RELOADED_NOTE = "the page was reloaded while this reply was being written: Continue writes it on, Regenerate starts it again"
SAVED_VERSION = 1  # the layout of ChatSession.saved; another one is not restored
SAVED_LIMIT_CHARS = 4_000_000  # a saved conversation larger than this is not restored (localStorage holds ~5 MB)


def parse_saved(saved: Any) -> dict | None:
    """A conversation kept in the browser (:meth:`ChatSession.saved`), checked field by field:
    ``{"history": [{"role": "user" | "assistant", "content": str}], "system_prompt": str,
    "exchanges": [{"message": str, "label", "text", "summary", "status", "note": str, "kept",
    "continues": bool}]}`` (``kept`` defaults to whether it has a label, ``continues`` to false:
    copies saved before they existed); None for no value.

    Raises:
        ValueError: not such a value (another version, a wrong type, too large).
    """
    if saved in (None, "", {}):
        return None
    if not isinstance(saved, dict) or saved.get("version") != SAVED_VERSION:
        raise ValueError("not a saved conversation of this version")
    if len(json.dumps(saved)) > SAVED_LIMIT_CHARS:
        raise ValueError("the saved conversation is too large")
    history, exchanges = saved.get("history"), saved.get("exchanges")
    if not isinstance(history, list) or not isinstance(exchanges, list) or not exchanges:
        raise ValueError("no history or exchanges")
    turns = []
    for m in history:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), str):
            raise ValueError("a history message that is not {role: user|assistant, content: text}")
        turns.append({"role": m["role"], "content": m["content"]})
    items = []
    for e in exchanges:
        if not isinstance(e, dict) or not isinstance(e.get("message"), str):
            raise ValueError("an exchange without a message")
        fields = {k: e.get(k, "") for k in ("label", "text", "summary", "status", "note")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("an exchange field that is not text")
        flags = {"kept": e.get("kept", bool(fields["label"])), "continues": e.get("continues", False)}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise ValueError("an exchange flag that is not true or false")
        items.append({"message": e["message"], **fields, **flags})
    system = saved.get("system_prompt", "")
    if not isinstance(system, str):
        raise ValueError("a system prompt that is not text")
    return {"history": turns, "exchanges": items, "system_prompt": system}


UNANSWERED = "not answered: the page was reloaded"  # a message kept across a reload before its reply (Regenerate sends it)


def saved_state(views: SessionViews, conversation: Conversation) -> dict:
    """The conversation as the page keeps it in the browser (Gradio's ``BrowserState``, written
    when a message is sent, every few seconds while a reply streams, after each reply and on
    Clear), for :func:`restore_state` after a reload: what the model sees (``history``), the
    system prompt, and each exchange as the chat shows it, text only. A reply still streaming is
    kept with what it wrote so far, in the history too (Continue writes it on after the reload);
    a message not answered yet (queued, or its reply has no text yet) is kept as typed with a
    note saying it was not answered. ``{}`` when there is nothing to keep (an
    empty chat: the browser writes no null, so a None would leave the last copy in place)."""
    items: list[dict[str, Any]] = []
    history = [dict(m) for m in conversation.messages]
    for e in views.exchanges:
        streaming = e.reply is not None and e.reply.running
        if streaming and e.continues and e.prefix is not None:  # a Continue streaming: the model sees one reply
            _continuing(e, items, history)
        elif streaming and e.reply is not None and e.reply.renderer.text and not e.continues:
            # a reload now keeps what streamed, as a reply cut short that Continue writes on
            r = e.reply
            items.append({"message": e.message, "label": r.label, "text": r.renderer.text, "summary": "",
                          "status": "cut short: the page was reloaded while this reply was being written",
                          "note": RELOADED_NOTE, "kept": True, "continues": False})
            history += [{"role": "user", "content": e.message}, {"role": "assistant", "content": r.renderer.text}]
        elif e.queued or streaming:  # kept as typed, marked unanswered
            when = "while it waited" if e.queued else "while its reply was being written"
            items.append({"message": e.message, "note": f"{UNANSWERED} {when}"})
        elif e.reply is not None:
            r = e.reply
            items.append({"message": e.message, "label": r.label, "text": r.renderer.text,
                          "summary": reply_summary(r.metrics), "status": r.renderer.status or "", "note": e.note or "",
                          "kept": e.kept, "continues": e.continues})
        elif e.restored is not None:
            items.append({"message": e.message, **e.restored.saved(), "note": e.note or "", "kept": e.kept,
                          "continues": e.continues})
        else:
            items.append({"message": e.message, "note": e.note or ""})
    if not items:
        return {}
    return {"version": SAVED_VERSION, "history": history, "exchanges": items,
            "system_prompt": conversation.system_prompt}


def _continuing(e: Exchange, items: list[dict[str, Any]], history: list[dict[str, str]]) -> None:
    """A Continue still streaming, as :func:`saved_state` keeps it: the reply it continues and what
    it wrote so far are one reply in the history (the conversation took that turn out while the
    Continue runs); the reply before gives its place in the conversation to this exchange."""
    assert e.reply is not None and e.prefix is not None
    text = e.reply.renderer.text
    history += [{"role": "user", "content": e.message}, {"role": "assistant", "content": e.prefix + text}]
    for item in reversed(items):
        if item.get("kept"):
            item["kept"] = False
            break
    items.append({"message": e.message, "label": e.reply.label, "text": text, "summary": "", "kept": True,
                  "continues": True, "note": RELOADED_NOTE,
                  "status": "cut short: the page was reloaded while this reply was being written"})


def restore_state(views: SessionViews, conversation: Conversation, saved: Any) -> bool:
    """After a reload: the conversation :func:`saved_state` kept in the browser, shown again (each
    reply as text, marked restored) and given to the model as history, so the chat goes on
    where it was. False (nothing changes) when this page has a conversation already, or
    ``saved`` is empty or not one (a value from another version, or tampered with: it comes
    from the browser, so every field is checked)."""
    if views.exchanges or conversation.messages:
        return False
    try:
        data = parse_saved(saved)
    except ValueError:
        return False
    if data is None:
        return False
    conversation.restore(data["history"], data["system_prompt"])
    reply_so_far = ""  # the reply a Continue writes on (with the continuations before it)
    for item in data["exchanges"]:
        if item.get("label"):
            lead = continuation_lead(reply_so_far) if item["continues"] else ""
            reply_so_far = reply_so_far + item["text"] if item["continues"] else item["text"]
            restored = Restored(item["label"], item["text"], item["summary"], item["status"], lead)
            views.add_exchange(Exchange(item["message"], restored=restored, note=item["note"] or None, kept=item["kept"],
                                        continues=item["continues"]))
            # the next reply's number follows the restored ones: after the highest a label shows (a
            # Regenerate left gaps: #1, #3), else after as many as there are
            shown = re.match(r"#(\d+) ", item["label"])
            views.reply_count = max(views.reply_count + 1, int(shown.group(1)) if shown else 0)
        else:
            views.add_exchange(Exchange(item["message"], note=item["note"] or None, continues=item["continues"]))
    return True


# -- the page's settings, kept in the browser across a reload ---------------------------------
SAVE_INTERVAL_S = 5.0  # while a reply streams, the page rewrites the browser's copy this often (its save tick)
DEFAULT_MAX_NEW_TOKENS = 1024  # the page's default reply length: 256 cut 2 of a tester's first 6 answers mid-code
# each control kept: its range (None: a choice), for parse_settings and the page's sliders
SETTING_RANGES: dict[str, tuple[float, float] | None] = {
    "gamma": (1, MAX_NUM_SPECULATIVE_TOKENS),
    "temperature": (0.0, MAX_TEMPERATURE),
    "top_p": (0.05, 1.0),
    "max_new_tokens": (16, 4096),
    "adaptive": None,
    "colours": None,
    "drafter": None,
    "system_prompt": None,
}
MAX_SYSTEM_PROMPT_CHARS = 100_000  # a kept system prompt longer than this (not typed: tampered with) is not restored
INTEGER_SETTINGS = frozenset({"gamma", "max_new_tokens"})
COLOUR_MODES = ("colours", "plain")


def settings_state(values: dict[str, Any]) -> dict:
    """The page's settings as the browser keeps them (a second ``BrowserState``, written on each
    change of a control): ``{"version": 1, "gamma": 12, "temperature": 0.0, …}``, the controls of
    :data:`SETTING_RANGES` that ``values`` has.

    A slider's value comes as its box holds it, keystroke by keystroke (typing 48 sends 4 first):
    a number out of range is kept as the nearest end of the range, which the box shows once
    left; γ and max new tokens are rounded to a whole number; anything else (the box emptied,
    NaN) is left out (until the box holds a number again)."""
    out: dict[str, Any] = {"version": SAVED_VERSION}
    for name, value in values.items():
        if name not in SETTING_RANGES:
            continue
        bounds = SETTING_RANGES[name]
        if bounds is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                continue
            value = min(max(value, bounds[0]), bounds[1])
            value = round(value) if name in INTEGER_SETTINGS else value
        out[name] = value
    return out


def kept_prompt(saved: Any, system_prompt: str) -> dict:
    """The kept settings ``saved`` (a :func:`settings_state`; anything else counts as none) with
    the system prompt's box as it is now: written on each change of the box, a chat shown
    included, from the kept value rather than the controls (on a page just opened they may not
    be restored yet)."""
    return settings_state({**(saved if isinstance(saved, dict) else {}), "system_prompt": system_prompt})


def parse_settings(saved: Any, drafters: list[str]) -> dict[str, Any]:
    """The settings :func:`settings_state` kept, each checked on its own: a number in its range
    (a whole one for γ and max new tokens), a bool for adaptive γ, ``"colours"`` or ``"plain"``,
    a drafter of ``drafters``, the system prompt's box as typed (a string). A value that fails its check is left out (that control keeps its
    default); anything else than a dict of this version gives ``{}``. Never raises: the value
    comes from the browser."""
    if not isinstance(saved, dict) or saved.get("version") != SAVED_VERSION:
        return {}
    out: dict[str, Any] = {}
    for name, bounds in SETTING_RANGES.items():
        value = saved.get(name)
        if bounds is not None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
            if ok and name in INTEGER_SETTINGS:
                ok = value == int(value)  # type: ignore[arg-type]  # a number, checked above
                value = int(value) if ok else value  # type: ignore[arg-type]
        elif name == "adaptive":
            ok = isinstance(value, bool)
        elif name == "colours":
            ok = value in COLOUR_MODES
        elif name == "system_prompt":
            ok = isinstance(value, str) and len(value) <= MAX_SYSTEM_PROMPT_CHARS
        else:
            ok = isinstance(value, str) and value in drafters
        if ok:
            out[name] = value
    return out
