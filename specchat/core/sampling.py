"""Pure tensor math of speculative sampling: warp logits, verify a draft, sample.

Everything here is stateless and device-agnostic. Source: Leviathan, Kalman, Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, Algorithm 1, and
Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling", Algorithm 2.

Naming: ``target_probs`` is p (the target's distribution after the warpers), ``draft_probs``
is q (the distribution each draft token was actually drawn from). Both come from
:func:`logits_to_probs` with the same settings, which is what makes the output exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specchat.core.events import TokenKind

# A residual whose total mass is at or below this is treated as empty; then we sample from
# target_probs instead (ALGORITHM.md step 4). Float32 rounding of p − q leaves ~1e-7 per entry.
RESIDUAL_MASS_EPS = 1e-6


TINY_TEMPERATURE = 1e-30  # below it, dividing by T is replaced by a finite scale (same limit)


def logits_to_probs(
    logits: torch.Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Turn raw logits into the sampling distribution: temperature → top-k → top-p → softmax.

    The single warper chain for both models, so ``target_probs`` and ``draft_probs`` are
    built the same way from the same prefix.

    Args:
        logits: ``[N, V]`` raw scores, any float dtype.
        temperature: 0 gives a one-hot at the argmax (greedy; ties go to the lowest id);
            otherwise logits are divided by it.
        top_k: keep the ``top_k`` highest logits (ties at the k-th value are all kept); 0 = off.
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p``
            (the most likely token is always kept); 1 = off.

    Returns:
        ``[N, V]`` float32 probabilities, each row sums to 1, exact zeros outside the kept set.

    Raises:
        ValueError: temperature < 0, top_k < 0 or top_p outside (0, 1].
    """
    if temperature < 0 or top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(
            f"need temperature >= 0, top_k >= 0, 0 < top_p <= 1; got {temperature}, {top_k}, {top_p}"
        )
    logits = logits.float()
    if temperature == 0.0:
        probs = torch.zeros_like(logits)
        probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
        return probs
    # subtract the row maximum first: dividing raw logits by a tiny temperature overflows float32
    logits = logits - logits.max(dim=-1, keepdim=True).values
    if temperature >= TINY_TEMPERATURE:
        logits = logits / temperature
    else:  # below float32's range T would round to 0 (0/0 = NaN): scale by 1e30 instead, which
        # already sends every non-maximal logit to -inf; ties at the maximum share the mass (T → 0+)
        logits = logits * (1.0 / TINY_TEMPERATURE)
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        remove_sorted = mass_before >= top_p  # the first token has mass_before 0: always kept
        remove = torch.zeros_like(remove_sorted).scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from ``probs`` (``[V]`` float32, sums to 1).

    A one-hot row returns its index without consuming randomness, so greedy decoding is
    deterministic whatever the seed.
    """
    top = int(probs.argmax())
    if float(probs[top]) >= 1.0:
        return top
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of verifying one round of drafts.

    Attributes:
        num_accepted: length of the leading run of accepted drafts, 0…γ.
        accepted_mask: the accept decision at each draft position (length γ). Positions after
            the first rejection are never committed; they are kept for the per-position chart
            only as far as the first rejection (see ``RoundEvent.accepted_mask``).
        next_token_id: the token committed after the accepted ones.
        next_kind: RESAMPLED (drawn from the residual after a rejection), BONUS (drawn from
            ``target_probs[γ]`` after full acceptance of γ ≥ 1 drafts) or TARGET (γ = 0: drawn
            from ``target_probs[0]``, a plain target decode step).
        draws: ``[γ]`` float32, the uniform draws u of the accept test (all γ are drawn; those
            after the first rejection decide nothing); None when γ = 0. Kept for the trace.
    """

    num_accepted: int
    accepted_mask: tuple[bool, ...]
    next_token_id: int
    next_kind: TokenKind
    draws: torch.Tensor | None = field(default=None, compare=False, repr=False)


def verify_draft(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> VerifyResult:
    """Speculative sampling acceptance: Leviathan et al. 2023, Algorithm 1, lines 5–10.

    For each draft i: draw u ~ U[0, 1) and accept when ``u · q(x_i) < p(x_i)``, which is
    ``u < p/q`` without a division: q(x) = 0 never divides, and p(x) = 0 is never accepted
    (0 < 0 is false, also at u = 0). At the first rejection sample from the residual
    ``norm(max(0, p − q))``; if it has no mass (p = q up to rounding) sample from p. After
    full acceptance sample a bonus token from ``target_probs[γ]``. With γ = 0 there is nothing to
    accept: the one token is drawn from ``target_probs[0]`` and is a TARGET token, not a bonus.

    Args:
        draft_token_ids: ``[γ]`` int64, the proposed tokens (γ may be 0).
        draft_probs: ``[γ, V]`` float32, q for each draft position (rows sum to 1), or None
            when every draft is deterministic (greedy or n-gram): q is then one-hot at the
            draft token.
        target_probs: ``[γ + 1, V]`` float32, p at each draft position plus the extra one.
        generator: random source for u and for the resampled/bonus draw.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        ValueError: on mismatched shapes.
    """
    gamma = int(draft_token_ids.shape[0])
    if target_probs.shape[0] != gamma + 1:
        raise ValueError(f"target_probs has {target_probs.shape[0]} rows, need γ+1 = {gamma + 1}")
    if draft_probs is not None and tuple(draft_probs.shape) != (gamma, target_probs.shape[1]):
        raise ValueError(f"draft_probs shape {tuple(draft_probs.shape)} != ({gamma}, {target_probs.shape[1]})")
    if gamma == 0:
        return VerifyResult(0, (), sample(target_probs[0], generator), TokenKind.TARGET)

    rows = torch.arange(gamma, device=target_probs.device)
    p_x = target_probs[rows, draft_token_ids]
    q_x = torch.ones_like(p_x) if draft_probs is None else draft_probs[rows, draft_token_ids]
    u = torch.rand(gamma, generator=generator, device=target_probs.device)
    accepted = (u * q_x < p_x).tolist()
    num_accepted = 0
    while num_accepted < gamma and accepted[num_accepted]:
        num_accepted += 1
    mask = tuple(bool(a) for a in accepted)
    if num_accepted == gamma:
        return VerifyResult(gamma, mask, sample(target_probs[gamma], generator), TokenKind.BONUS, u)

    i = num_accepted
    token = int(draft_token_ids[i])
    residual = residual_probs(target_probs[i], None if draft_probs is None else draft_probs[i], token)
    return VerifyResult(i, mask, sample(residual, generator), TokenKind.RESAMPLED, u)


def residual_probs(
    target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_token_id: int
) -> torch.Tensor:
    """norm(max(0, p − q)) for one position; p itself when the residual has no mass.

    Args:
        target_probs: ``[V]`` float32, p.
        draft_probs: ``[V]`` float32, q; None means one-hot at ``draft_token_id``.
        draft_token_id: the rejected draft token (used only when ``draft_probs`` is None).

    Returns:
        ``[V]`` float32 summing to 1, zero wherever p is zero.
    """
    if draft_probs is None:
        residual = target_probs.clone()
        residual[draft_token_id] = 0.0
    else:
        residual = torch.clamp(target_probs - draft_probs, min=0.0)
    mass = float(residual.sum())
    if mass <= RESIDUAL_MASS_EPS:
        return target_probs
    return residual / mass
