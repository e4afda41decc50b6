"""Round traces: everything a learner needs to see inside a round, recorded by the engine.

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

The trace file that stores them (JSON lines) is :mod:`specchat.analysis.trace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from specchat.core.events import TokenEvent

TRACE_TOP_K = 10
"""Entries kept in every top list of a trace."""


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
    """One position of a round: draft position i < n, or the extra position n (bonus; in a round that
    drafted nothing, n = 0 is the target's one position).

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
            ("resampled", "bonus", or "target" for a round that drafted nothing); a stop inside
            the round may have cut it from the commit.
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
        draft_trace: the drafter's :class:`~specchat.core.draft.DraftTrace`, or None.
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
