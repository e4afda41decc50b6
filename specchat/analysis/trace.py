"""The trace file: a reply's events, round traces included, as JSON lines (docs/TRACE.md).

Written from a reply's events by :func:`trace_records` and read back by :func:`read_trace`,
which rebuilds the events so that every view of the app can show a recorded reply without
loading a model. What a round trace holds is :mod:`specchat.core.roundtrace`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.core.roundtrace import (
    TRACE_TOP_K,
    CommittedToken,
    DraftedToken,
    PositionTrace,
    ProofTrace,
    RoundTrace,
    TopList,
)

TRACE_VERSION = 2
"""The format version this module writes. Version 2 (2026-12) gave the one token of a round that
drafted nothing its own kind, ``target``; version 1 called it ``bonus``, and :func:`read_trace`
reads such a file as if it were version 2 (the kind follows from the round having no draft)."""

# ---- the trace file ---------------------------------------------------------------------------
def _top_json(top: TopList | None) -> list | None:
    return None if top is None else [[t, p] for t, p in top]


def _top_from(value: Any) -> TopList | None:
    return None if value is None else _tops(value)


def _tops(value: Any) -> TopList:
    """``[[id, p], …]`` (a top list that every record has) → TopList."""
    return tuple((int(t), float(p)) for t, p in value)


def round_record(event: RoundEvent) -> dict[str, Any]:
    """The ``{"type": "round", …}`` line of a traced RoundEvent (docs/TRACE.md)."""
    tr = event.trace
    if tr is None:
        raise ValueError(f"round {event.round_index} has no trace (generate with GenerationConfig(trace=True))")
    texts = tr.token_texts
    return {
        "type": "round",
        "round": event.round_index,
        "drafted": [
            {"token_id": d.token_id, "text": texts.get(d.token_id, ""), "p": d.p, "q": d.q, "u": d.u,
             "accepted": d.accepted}
            for d in tr.drafted
        ],
        "next": {"token_id": tr.next_token_id, "text": texts.get(tr.next_token_id, ""), "kind": tr.next_kind},
        "positions": [
            {"target_top": _top_json(p.target_top), "draft_top": _top_json(p.draft_top),
             "target_top_raw": _top_json(p.target_top_raw), "draft_top_raw": _top_json(p.draft_top_raw),
             "residual_top": _top_json(p.residual_top),
             **({} if p.proof is None else {"proof": {"beta": p.proof.beta, "tokens": [list(r) for r in p.proof.rows],
                                                      "other": list(p.proof.other)}})}
            for p in tr.positions
        ],
        "draft_ms": event.draft_ms,
        "verify_ms": event.verify_ms,
        "draft_step_ms": list(tr.draft_step_ms),
        "committed": [dataclasses.asdict(c) for c in tr.committed],
        "ngram_source": None if tr.copy_start is None else {
            "copy_start": tr.copy_start, "match_len": tr.match_len,
            "text": None if tr.source_text is None else list(tr.source_text)},
        "num_prompt_tokens": tr.num_prompt_tokens,
        "num_speculative_tokens": event.num_speculative_tokens,
        "num_accepted": event.num_accepted,
        "num_committed": event.num_committed,
        "accepted_mask": list(event.accepted_mask),
        "draft_steps": event.draft_steps,
        "round_ms": event.round_ms,
        "elapsed_ms": event.elapsed_ms,
        "timing": event.timing,
        "drafting_paused": event.drafting_paused,
        **({"paused_speedup": event.paused_speedup} if event.paused_speedup is not None else {}),
        "token_texts": {str(t): s for t, s in texts.items()},
    }


def done_record(done: DoneEvent) -> dict[str, Any]:
    """The last line, ``{"type": "done", …}``."""
    return {
        "type": "done",
        "token_ids": list(done.token_ids),
        "kinds": [k.value for k in done.kinds],
        "stop_reason": done.stop_reason.value,
        "text": done.text,
        "final_text": done.final_text,
        "prefill_ms": done.prefill_ms,
        "decode_ms": done.decode_ms,
        "num_prompt_tokens": done.num_prompt_tokens,
        "num_prefilled": done.num_prefilled,
        "drafter_prefill_ms": done.drafter_prefill_ms,
        "error": done.error,
    }


def trace_records(
    events: Iterable[Any],
    *,
    target: str,
    drafter: str,
    config: Any,
    prompt_ids: Iterable[int],
    **header: Any,
) -> Iterator[dict[str, Any]]:
    """The trace file's lines, from one generation's events (those that are not a TokenEvent,
    a traced RoundEvent or the DoneEvent, such as notices, are left out).

    Args:
        events: the generation's events, in order, generated with ``config.trace``.
        target / drafter: names for the header.
        config: the GenerationConfig (written as a dict) or a dict.
        prompt_ids: the prompt's token ids.
        header: extra header fields (e.g. ``message``, the user's text).

    Raises:
        ValueError: a RoundEvent without a trace.
    """
    config_dict = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else dict(config)
    config_dict["stop_strings"] = list(config_dict.get("stop_strings") or ())
    yield {"type": "header", "version": TRACE_VERSION, "target": target, "drafter": drafter, "config": config_dict,
           "prompt_ids": [int(i) for i in prompt_ids], "top_k": TRACE_TOP_K, **header}
    for event in events:
        if isinstance(event, RoundEvent):
            yield round_record(event)
        elif isinstance(event, DoneEvent):
            yield done_record(event)


def write_trace(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write ``records`` as JSON lines (UTF-8). Returns the path."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@dataclass
class TraceFile:
    """A trace read back: its header and the events it stands for (TokenEvents with their
    RoundEvents, each RoundEvent with its :class:`RoundTrace`, then the DoneEvent)."""

    header: dict[str, Any]
    events: list[Any]

    @property
    def done(self) -> DoneEvent | None:
        return next((e for e in reversed(self.events) if isinstance(e, DoneEvent)), None)


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the line and what is wrong."""


def read_trace(source: str | Path | Iterable[str]) -> TraceFile:
    """Read a trace file (a path, or its lines) back into events.

    Raises:
        TraceError: not JSON lines, no header first, an unknown record type, a round
            record that lacks a field the views need (the message gives the line number), or
            a version newer than :data:`TRACE_VERSION` (written by a newer specchat).
        OSError: the file cannot be opened.
    """
    if isinstance(source, (str, Path)):
        try:
            with Path(source).open(encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            raise TraceError(f"{Path(source).name} is not a text file: is this a specchat trace file?") from None
    else:
        lines = list(source)
    header: dict[str, Any] | None = None
    events: list[Any] = []
    last = max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == last and header is not None:  # a recording cut mid-line: keep what is whole
                break
            raise TraceError(f"line {number} is not JSON ({exc.msg}): is this a specchat trace file?") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if header is None:
            if kind != "header":
                raise TraceError(f"line {number}: a trace starts with a header line, got {kind!r}")
            header = record
            version = header.get("version", 1)
            if not isinstance(version, int) or version > TRACE_VERSION:
                raise TraceError(f"line {number}: trace version {version!r}; this specchat reads versions up to "
                                 f"{TRACE_VERSION}: upgrade specchat to open it")
            continue
        try:
            if kind == "round":
                events.extend(_round_events(record if version >= 2 else _round_v1(record)))
            elif kind == "done":
                done = _done_event(record)
                if version < 2:
                    done = _done_v1(done, events)
                events.append(done)
            else:
                raise TraceError(f"line {number}: unknown record type {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, TraceError):
                raise
            raise TraceError(f"line {number}: a {kind} record with a missing or bad field ({exc!r})") from None
    if header is None:
        raise TraceError("the file is empty: no header line")
    return with_prompt(TraceFile(header, events))


def _round_events(r: dict[str, Any]) -> list[Any]:
    texts = {int(t): s for t, s in (r.get("token_texts") or {}).items()}
    for d in r["drafted"]:
        texts.setdefault(int(d["token_id"]), d.get("text", ""))
    drafted = tuple(
        DraftedToken(int(d["token_id"]), float(d["p"]), float(d["q"]),
                     None if d["u"] is None else float(d["u"]), d["accepted"])
        for d in r["drafted"]
    )
    committed = tuple(
        CommittedToken(int(c["token_id"]), str(c["kind"]), str(c["text"]), float(c["p"]),
                       None if c.get("q") is None else float(c["q"]))
        for c in r["committed"]
    )
    positions = tuple(
        PositionTrace(_tops(p["target_top"]), _tops(p["target_top_raw"]), _top_from(p.get("draft_top")),
                      _top_from(p.get("draft_top_raw")), _top_from(p.get("residual_top")), _proof_from(p.get("proof")))
        for p in r["positions"]
    )
    source = r.get("ngram_source") or {}
    trace = RoundTrace(
        drafted=drafted, next_token_id=int(r["next"]["token_id"]), next_kind=str(r["next"]["kind"]),
        committed=committed, positions=positions, draft_step_ms=tuple(r.get("draft_step_ms") or ()),
        copy_start=source.get("copy_start"), match_len=source.get("match_len"), token_texts=texts,
        num_prompt_tokens=r.get("num_prompt_tokens"),
        source_text=tuple(source["text"]) if source.get("text") else None,
    )
    index, n = int(r["round"]), len(drafted)
    out: list[Any] = []
    for pos, c in enumerate(committed):
        kind = TokenKind(c.kind)
        rejected = drafted[pos] if kind is TokenKind.RESAMPLED and pos < n else None
        out.append(TokenEvent(
            token_id=c.token_id, kind=kind, text=c.text, target_prob=c.p, draft_prob=c.q,
            rejected_token_id=None if rejected is None else rejected.token_id,
            rejected_target_prob=None if rejected is None else rejected.p,
            rejected_draft_prob=None if rejected is None else rejected.q,
            round_index=index, position=pos, num_drafted=n,
        ))
    out.append(RoundEvent(
        round_index=index, num_speculative_tokens=int(r.get("num_speculative_tokens", n)), num_drafted=n,
        num_accepted=int(r["num_accepted"]), num_committed=int(r["num_committed"]),
        accepted_mask=tuple(bool(a) for a in r["accepted_mask"]), draft_ms=float(r["draft_ms"]),
        draft_steps=int(r.get("draft_steps", 0)), verify_ms=float(r["verify_ms"]),
        elapsed_ms=float(r["elapsed_ms"]), round_ms=float(r["round_ms"]), timing=bool(r.get("timing", False)),
        drafting_paused=bool(r.get("drafting_paused", False)),
        paused_speedup=float(r["paused_speedup"]) if r.get("paused_speedup") is not None else None, trace=trace,
    ))
    return out


def _round_v1(r: dict[str, Any]) -> dict[str, Any]:
    """A version-1 round record as version 2: in a round that drafted nothing, the "bonus" next
    token and committed token become "target" (version 1 had no such kind)."""
    if r.get("drafted"):
        return r
    as_target = lambda kind: "target" if kind == "bonus" else kind  # noqa: E731
    return {**r, "next": {**r["next"], "kind": as_target(r["next"].get("kind"))},
            "committed": [{**c, "kind": as_target(c.get("kind"))} for c in r["committed"]]}


def _done_v1(done: DoneEvent, events: list[Any]) -> DoneEvent:
    """A version-1 done record's kinds, with the target tokens its rounds now carry."""
    tokens = [e.kind for e in events if isinstance(e, TokenEvent)]
    if len(tokens) != len(done.kinds):  # a file cut short: keep what it says
        return done
    kinds = tuple(TokenKind.TARGET if k is TokenKind.BONUS and t is TokenKind.TARGET else k
                  for k, t in zip(done.kinds, tokens))
    return dataclasses.replace(done, kinds=kinds)


def _proof_from(value: Any) -> ProofTrace | None:
    if value is None:
        return None
    rows = tuple((int(t), float(p), float(q), float(res)) for t, p, q, res in value["tokens"])
    other = tuple(float(x) for x in value.get("other") or (0.0, 0.0, 0.0))
    if len(other) != 3:
        raise ValueError("proof.other needs three numbers")
    return ProofTrace(float(value["beta"]), rows, other)


def _done_event(r: dict[str, Any]) -> DoneEvent:
    return DoneEvent(
        stop_reason=StopReason(r["stop_reason"]), token_ids=tuple(int(t) for t in r["token_ids"]),
        kinds=tuple(TokenKind(k) for k in r.get("kinds") or ()), text=str(r.get("text", "")),
        prefill_ms=float(r.get("prefill_ms", 0.0)), decode_ms=float(r.get("decode_ms", 0.0)),
        num_prompt_tokens=int(r.get("num_prompt_tokens", 0)), final_text=str(r.get("final_text", "")),
        error=r.get("error"), num_prefilled=None if r.get("num_prefilled") is None else int(r["num_prefilled"]),
        drafter_prefill_ms=None if r.get("drafter_prefill_ms") is None else float(r["drafter_prefill_ms"]),
    )


def with_prompt(trace: TraceFile) -> TraceFile:
    """The done event gets the header's prompt ids (the live DoneEvent carries them too)."""
    done = trace.done
    if done is not None and not done.prompt_ids:
        i = trace.events.index(done)
        trace.events[i] = dataclasses.replace(done, prompt_ids=tuple(int(t) for t in trace.header.get("prompt_ids", ())))
    return trace
