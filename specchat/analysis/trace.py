"""Round traces: everything a learner needs to see inside a round, and the trace file.

With ``GenerationConfig.trace`` the engine attaches a :class:`RoundTrace` to each
:class:`~specchat.core.events.RoundEvent`: the whole draft (also the tokens after the first
rejection, which were never judged), for each judged draft token its p, q and the uniform draw
u that decided it (Leviathan et al. 2023, Algorithm 1: accept when u < p/q, here u·q < p), and
for each position of the round the top-k of p and of q, both *raw* (softmax of the logits at
temperature 1, before any warper) and *as used* (after temperature, top-k and top-p), the top-k
of the residual norm(max(0, p − q)) at a rejection, where an n-gram draft was copied from, and
the draft-step and verify times.

Memory: only top-k lists (k = :data:`TRACE_TOP_K` = 10), never a vocabulary-sized tensor. A
round of γ drafts holds at most (γ + 1)·4k + k (id, probability) pairs plus 2γ + 1 token
records and the text of each distinct id in them, so a reply holds at most
max_new_tokens × ((γ_max + 1)·40 + 10) pairs (one round per token in the worst case); a
typical reply holds far fewer (E[N] tokens per round).

The trace file (JSON lines, documented in docs/TRACE.md) is written from a reply's events by
:func:`trace_records` and read back by :func:`read_trace`, which rebuilds the events so that
every view of the app can show a recorded reply without loading a model.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind

TRACE_TOP_K = 10
"""Entries kept in every top list of a trace."""

TRACE_VERSION = 1

SOURCE_CONTEXT = 24
"""Tokens of context shown before an n-gram draft's source (a third of it after)."""

TopList = tuple[tuple[int, float], ...]
"""``((token_id, prob), …)``, most likely first, zero-probability entries left out."""


@dataclass(frozen=True)
class DraftedToken:
    """One drafted token of a round.

    Attributes:
        token_id: the proposed id.
        p: the target's probability of it at its position, as used (after the warpers).
        q: the drafter's probability of it, as used (1.0 for a deterministic draft: greedy or
            n-gram, q one-hot).
        u: the uniform draw in [0, 1) that decided it, or None when it was never judged (it
            came after the first rejection).
        accepted: ``u · q < p`` (computed in float32 by the engine), or None when not judged.
    """

    token_id: int
    p: float
    q: float
    u: float | None
    accepted: bool | None


@dataclass(frozen=True)
class PositionTrace:
    """One position of a round: draft position i < n, or the extra position n (bonus).

    Attributes:
        target_top / target_top_raw: top-k of p as used, and of the target's raw softmax (T = 1).
        draft_top / draft_top_raw: the same for q; None at the extra position, and the raw list
            is None for a drafter with no model (n-gram lookup: q as used is one-hot).
        residual_top: top-k of norm(max(0, p − q)) at the rejected position (what the resampled
            token was drawn from; p itself when the residual has no mass); None elsewhere.
        proof: at the rejected position, the numbers of the exactness argument
            (:class:`ProofTrace`); None elsewhere.
    """

    target_top: TopList
    target_top_raw: TopList
    draft_top: TopList | None = None
    draft_top_raw: TopList | None = None
    residual_top: TopList | None = None
    proof: ProofTrace | None = None


@dataclass(frozen=True)
class ProofTrace:
    """The exactness argument's numbers at a rejected position (Leviathan et al. 2023,
    Appendix A.1; Chen et al. 2023, Theorem 1): P(emit x) = min(p(x), q(x)) + (1 − β)·p′(x) = p(x),
    with β = Σ_x min(p(x), q(x)) and p′ = norm(max(0, p − q)) the residual.

    Attributes:
        beta: β, summed over the whole vocabulary (float64 over the float32 p and q as used).
        rows: ``((token_id, p, q, residual), …)`` for the union of the top-k of p, q and the
            residual, most likely under p first; ``residual`` is p′(x) as the engine sampled it.
        other: ``(p, min(p, q), residual)`` summed over every token not in ``rows``.
    """

    beta: float
    rows: tuple[tuple[int, float, float, float], ...]
    other: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class CommittedToken:
    """A committed token as the live reply showed it (the TokenEvent's fields)."""

    token_id: int
    kind: str
    text: str
    p: float
    q: float | None


@dataclass(frozen=True)
class RoundTrace:
    """Everything recorded about one round (see the module docstring).

    Attributes:
        drafted: the whole draft, in order.
        next_token_id / next_kind: the token verification added after the accepted drafts
            ("resampled" or "bonus"); a stop inside the round may have cut it from the commit.
        committed: the tokens the round committed, as shown.
        positions: ``len(drafted) + 1`` positions.
        draft_step_ms: each draft step's time, milliseconds (empty for n-gram and target-only).
        copy_start / match_len: for an n-gram draft, where in the context (prompt + reply, token
            index) the copied continuation starts, and how many tokens before it matched.
        token_texts: the text of every id in this record (for labels without a tokenizer).
        num_prompt_tokens: the prompt's length (context index of the reply's first token).
        source_text: for an n-gram draft, the context around its source as four strings:
            before the match, the matched tokens, the copied ones, a little after.
    """

    drafted: tuple[DraftedToken, ...]
    next_token_id: int
    next_kind: str
    committed: tuple[CommittedToken, ...]
    positions: tuple[PositionTrace, ...]
    draft_step_ms: tuple[float, ...] = ()
    copy_start: int | None = None
    match_len: int | None = None
    token_texts: dict[int, str] = field(default_factory=dict)
    num_prompt_tokens: int | None = None
    source_text: tuple[str, str, str, str] | None = None

    @property
    def rejected_index(self) -> int | None:
        """Index in ``drafted`` of the rejected draft, or None (all accepted, or no draft)."""
        for i, d in enumerate(self.drafted):
            if d.accepted is False:
                return i
        return None


# ---- building (the engine calls this; torch stays out of the module's import) ----------------
def top_list(probs, k: int = TRACE_TOP_K) -> TopList:
    """Top ``k`` of a ``[V]`` probability row as ``((id, prob), …)``, most likely first; entries
    with probability 0 are left out (a warped row may keep fewer than k tokens)."""
    import torch

    values, ids = torch.topk(probs.float(), min(k, probs.shape[-1]))
    return tuple((int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist()) if v > 0.0)


def proof_trace(
    target_probs, draft_probs, draft_token_id: int, residual, k: int = TRACE_TOP_K, *, include: Iterable[int] = ()
) -> ProofTrace:
    """The :class:`ProofTrace` of one position.

    Args:
        target_probs: ``[V]`` float32 p as used.
        draft_probs: ``[V]`` float32 q as used, or None (one-hot at ``draft_token_id``).
        draft_token_id: the drafted token.
        residual: ``[V]`` float32, the residual the engine sampled from
            (:func:`specchat.core.sampling.residual_probs`).
        include: ids listed even when outside every top k (the rejected draft is always listed;
            the engine adds the resampled token).
    """
    import torch

    p = target_probs.double()
    if draft_probs is None:
        q = torch.zeros_like(p)
        q[draft_token_id] = 1.0
    else:
        q = draft_probs.double()
    r = residual.double()
    overlap = torch.minimum(p, q)
    ids: list[int] = list(dict.fromkeys([int(draft_token_id), *(int(t) for t in include)]))
    for row in (p, q, r):
        values, top = torch.topk(row, min(k, row.shape[-1]))
        ids.extend(int(t) for t, v in zip(top.tolist(), values.tolist()) if v > 0.0 and int(t) not in ids)
    ids.sort(key=lambda t: (-float(p[t]), t))  # ties by id: the same order every time
    index = torch.tensor(ids, dtype=torch.long, device=p.device)
    rest = lambda x: float(x.sum() - x[index].sum())  # noqa: E731
    return ProofTrace(
        beta=float(overlap.sum()),
        rows=tuple((t, float(p[t]), float(q[t]), float(r[t])) for t in ids),
        other=(rest(p), rest(overlap), rest(r)),
    )


def build_round_trace(
    *,
    draft_ids,
    draft_probs,
    draft_trace,
    target_logits,
    target_probs,
    result,
    token_events: list[TokenEvent],
    token_text: Callable[[int], str],
    context_ids: list[int] | None = None,
    num_prompt_tokens: int | None = None,
    decode: Callable[[list[int]], str] | None = None,
    k: int = TRACE_TOP_K,
) -> RoundTrace:
    """The :class:`RoundTrace` of one round, from the tensors the engine had.

    Args:
        draft_ids: ``[n]`` int64, the draft.
        draft_probs: ``[n, V]`` float32 q as used, or None (one-hot at the draft).
        draft_trace: the drafter's :class:`~specchat.drafters.base.DraftTrace`, or None.
        target_logits: ``[n + 1, V]`` the verify pass's raw logits.
        target_probs: ``[n + 1, V]`` float32 p as used.
        result: the :class:`~specchat.core.sampling.VerifyResult`.
        token_events: the round's committed TokenEvents.
        token_text: id → text, for the labels.
        context_ids: the context the round drafted after (prompt + reply before the round),
            for the n-gram source excerpt; ``decode`` turns ids into text for it.
        num_prompt_tokens: the prompt's length.
    """
    import torch

    from specchat.core.sampling import residual_probs

    n = int(draft_ids.shape[0])
    ids = draft_ids.tolist()
    judged = min(n, result.num_accepted + 1)
    if len(token_events) < result.num_accepted + 1:  # a stop cut the commit: later drafts count for nothing
        judged = len(token_events)
    draws = result.draws.tolist() if result.draws is not None else []
    drafted = []
    for i, token in enumerate(ids):
        q = 1.0 if draft_probs is None else float(draft_probs[i, token])
        drafted.append(DraftedToken(
            token_id=token, p=float(target_probs[i, token]), q=q,
            u=float(draws[i]) if i < judged else None,
            accepted=bool(result.accepted_mask[i]) if i < judged else None,
        ))
    raw_target = torch.softmax(target_logits.float(), dim=-1)
    raw_draft = None
    if draft_trace is not None and draft_trace.raw_logits is not None:
        raw_draft = torch.softmax(draft_trace.raw_logits.float(), dim=-1)
    rejected = result.num_accepted if result.num_accepted < judged else None
    positions = []
    for i in range(n + 1):
        draft_top = draft_top_raw = residual_top = proof = None
        if i < n:
            draft_top = ((ids[i], 1.0),) if draft_probs is None else top_list(draft_probs[i], k)
            if raw_draft is not None and i < raw_draft.shape[0]:
                draft_top_raw = top_list(raw_draft[i], k)
        if i == rejected:
            q_row = None if draft_probs is None else draft_probs[i]
            residual = residual_probs(target_probs[i], q_row, ids[i])
            residual_top = top_list(residual, k)
            proof = proof_trace(target_probs[i], q_row, ids[i], residual, k, include=(int(result.next_token_id),))
        positions.append(PositionTrace(
            target_top=top_list(target_probs[i], k), target_top_raw=top_list(raw_target[i], k),
            draft_top=draft_top, draft_top_raw=draft_top_raw, residual_top=residual_top, proof=proof,
        ))
    committed = tuple(
        CommittedToken(e.token_id, e.kind.value, e.text, e.target_prob, e.draft_prob) for e in token_events
    )
    trace = RoundTrace(
        drafted=tuple(drafted), next_token_id=int(result.next_token_id), next_kind=result.next_kind.value,
        committed=committed, positions=tuple(positions),
        draft_step_ms=tuple(draft_trace.step_ms) if draft_trace is not None else (),
        copy_start=getattr(draft_trace, "copy_start", None), match_len=getattr(draft_trace, "match_len", None),
        num_prompt_tokens=num_prompt_tokens,
    )
    if trace.copy_start is not None and context_ids is not None and decode is not None:
        s, m = trace.copy_start, trace.match_len or 0
        trace = dataclasses.replace(trace, source_text=(
            decode(context_ids[max(0, s - m - SOURCE_CONTEXT): s - m]), decode(context_ids[s - m: s]),
            decode(context_ids[s: s + n]), decode(context_ids[s + n: s + n + SOURCE_CONTEXT // 3]),
        ))
    wanted = {trace.next_token_id, *ids, *(c.token_id for c in committed)}
    for pos in positions:
        for top in (pos.target_top, pos.target_top_raw, pos.draft_top, pos.draft_top_raw, pos.residual_top):
            wanted.update(t for t, _ in top or ())
        wanted.update(row[0] for row in (pos.proof.rows if pos.proof is not None else ()))
    trace.token_texts.update({t: token_text(t) for t in sorted(wanted)})
    return trace


# ---- the trace file ---------------------------------------------------------------------------
def _top_json(top: TopList | None) -> list | None:
    return None if top is None else [[t, p] for t, p in top]


def _top_from(value: Any) -> TopList | None:
    return None if value is None else tuple((int(t), float(p)) for t, p in value)


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
    config_dict = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
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
        TraceError: not JSON lines, no header first, an unknown record type, or a round
            record that lacks a field the views need (the message gives the line number).
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
            continue
        try:
            if kind == "round":
                events.extend(_round_events(record))
            elif kind == "done":
                events.append(_done_event(record))
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
        PositionTrace(_top_from(p["target_top"]), _top_from(p["target_top_raw"]), _top_from(p.get("draft_top")),
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
        trace=trace,
    ))
    return out


def _proof_from(value: Any) -> ProofTrace | None:
    if value is None:
        return None
    rows = tuple((int(t), float(p), float(q), float(res)) for t, p, q, res in value["tokens"])
    other = tuple(float(x) for x in value.get("other") or (0.0, 0.0, 0.0))
    if len(other) != 3:
        raise ValueError("proof.other needs three numbers")
    return ProofTrace(float(value["beta"]), rows, other)  # type: ignore[arg-type]


def _done_event(r: dict[str, Any]) -> DoneEvent:
    return DoneEvent(
        stop_reason=StopReason(r["stop_reason"]), token_ids=tuple(int(t) for t in r["token_ids"]),
        kinds=tuple(TokenKind(k) for k in r.get("kinds") or ()), text=str(r.get("text", "")),
        prefill_ms=float(r.get("prefill_ms", 0.0)), decode_ms=float(r.get("decode_ms", 0.0)),
        num_prompt_tokens=int(r.get("num_prompt_tokens", 0)), final_text=str(r.get("final_text", "")),
        error=r.get("error"), num_prefilled=None if r.get("num_prefilled") is None else int(r["num_prefilled"]),
    )


def with_prompt(trace: TraceFile) -> TraceFile:
    """The done event gets the header's prompt ids (the live DoneEvent carries them too)."""
    done = trace.done
    if done is not None and not done.prompt_ids:
        i = trace.events.index(done)
        trace.events[i] = dataclasses.replace(done, prompt_ids=tuple(int(t) for t in trace.header.get("prompt_ids", ())))
    return trace
