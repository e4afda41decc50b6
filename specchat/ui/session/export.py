"""A conversation exported from the page: as Markdown (to read, paste or keep) and as JSON (with
each reply's settings and measured figures, to analyse).

Both list every exchange the page shows, in order: the message, the reply's text as the model
wrote it, its label (number, drafter, γ, sampling), whether it is part of the conversation
(a regenerated or failed reply is not), and for JSON the reply's figures
(:meth:`~specchat.core.metrics.SpeculationMetrics.summary`: tokens, α, tokens per round, tok/s,
the measured and predicted speedups, with ``speedup_shown`` false where the evidence was too
thin for the page to show it). A reply restored after a reload has its text and label, not its
figures (the browser keeps no events).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from specchat.conversation import Conversation
from specchat.ui.html.markdown import open_fence
from specchat.ui.session.reply import Exchange
from specchat.ui.session.views import SessionViews

EXPORT_VERSION = 1


def _reply_of(e: Exchange) -> dict[str, Any] | None:
    """An exchange's reply as export data, or None (a message never answered)."""
    if e.reply is not None:
        r = e.reply
        return {"number": r.number, "label": r.label, "text": r.renderer.text, "target": r.target, "drafter": r.drafter,
                "state": r.phase.value, "status": r.renderer.status or "", "settings": dataclasses.asdict(r.settings),
                "seed": r.config.seed if r.config is not None else None, "figures": r.metrics.summary()}
    if e.restored is not None:
        return {"label": e.restored.label, "text": e.restored.text, "status": e.restored.status,
                "summary": e.restored.summary, "restored": True}
    return None


def export_json(views: SessionViews, conversation: Conversation, *, target: str, title: str = "",
                now: _dt.datetime | None = None) -> dict:
    """The conversation as JSON-ready data (module docstring): ``{"version", "title" (the chat's
    name in the list, "" when none), "target" (the model now; each reply names its own, which
    differs after a model switch),
    "exported_at" (ISO 8601, UTC), "system_prompt", "history" (what the model sees next),
    "exchanges": [{"message", "kept", "continues", "note", "reply": {…} | null}]}``."""
    when = (now or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds")
    exchanges = [{"message": e.message, "kept": e.kept, "continues": e.continues, "note": e.note or "",
                  "reply": _reply_of(e)} for e in views.exchanges]
    return {"version": EXPORT_VERSION, "title": title, "target": target, "exported_at": when, "system_prompt": conversation.system_prompt,
            "history": [dict(m) for m in conversation.messages], "exchanges": exchanges}


def export_markdown(data: dict) -> str:
    """:func:`export_json`'s data as Markdown: a title, the system prompt, then each message
    and reply under its own heading (a reply's label and summary in italics, its text as written).
    A reply and its continuations (Continue) are one text under the reply's heading, each part's
    label and figures listed above it, so a code block cut by the token limit reads whole."""
    title = data.get("title") or f"Conversation with {data['target']}"
    lines = [f"# {title}", "", f"_{data['target']}, exported {data['exported_at']} from specchat_", ""]
    if data["system_prompt"].strip():
        lines += ["**System prompt:**", "", data["system_prompt"], ""]
    text: str | None = None  # the reply being written out, with its continuations
    status = ""  # how its last part ended, when unusual ("stopped: max new tokens reached")

    def flush() -> list[str]:
        return [_closed(text or ""), ""] + ([f"_{status}_", ""] if status else [])

    for e in data["exchanges"]:
        reply = e["reply"]
        if e["continues"] and reply is not None and text is not None:
            lines += [f"_continued: {reply['label']}" + (f" · {_figures_line(reply['figures'])}"
                                                         if reply.get("figures") is not None else "") + "_", ""]
            text, status = text + reply["text"], reply.get("status") or ""
            continue
        if text is not None:
            lines += flush()
            text = None
        lines += ["## Continue", ""] if e["continues"] else ["## You", "", _closed(_hard_breaks(e["message"])), ""]
        if e["note"]:
            lines += [f"_{e['note']}_", ""]
        if reply is None:
            continue
        figures = reply.get("figures")
        other = reply.get("target") and reply["target"] != data["target"]  # written before a model switch
        lines += [f"### {reply['label']}" + (f" · target {reply['target']}" if other else ""), ""]
        if figures is not None:
            lines += [f"_{_figures_line(figures)}_", ""]
        elif reply.get("summary"):  # a reply restored after a reload: the summary line the page kept
            lines += [f"_{reply['summary']}_", ""]
        text, status = reply["text"], reply.get("status") or ""
    if text is not None:
        lines += flush()
    return "\n".join(lines).rstrip() + "\n"


def _hard_breaks(message: str) -> str:
    """A typed message's line breaks (Shift+Enter) kept in Markdown, as the page shows them: a line
    followed by another ends with two spaces (a hard break; dropped where a paragraph ends), outside
    code blocks."""
    lines, out, fenced = message.split("\n"), [], False
    for i, line in enumerate(lines):
        fence = line.lstrip().startswith(("```", "~~~"))
        fenced ^= fence
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if not fenced and not fence and line.strip() and nxt.strip() and not nxt.lstrip().startswith(("```", "~~~")):
            line += "  "
        out.append(line)
    return "\n".join(out)


def _closed(text: str) -> str:
    """``text`` with a code fence it left open closed (a reply cut at its token limit inside a code
    block would otherwise swallow the rest of the file)."""
    lead = open_fence(text).strip()
    if not lead:
        return text
    fence = lead[: len(lead) - len(lead.lstrip(lead[0]))]  # the fence's characters, without the language
    return text + ("" if text.endswith("\n") else "\n") + fence


def _figures_line(f: dict) -> str:
    """``142 tokens · α 0.81 · 3.20 tokens/round · 21.5 tok/s · 1.92× measured``."""
    parts = [f"{f['num_tokens']} tokens"]
    if f["acceptance_rate"] is not None:
        parts.append(f"α {f['acceptance_rate']:.2f}")
    if f["mean_tokens_per_round"] is not None:
        parts.append(f"{f['mean_tokens_per_round']:.2f} tokens/round")
    if f["tokens_per_s"] is not None:
        parts.append(f"{f['tokens_per_s']:.1f} tok/s")
    if f["speedup"] is not None and f["speedup_shown"]:
        parts.append(f"{f['speedup']:.2f}× measured")
    return " · ".join(parts)
