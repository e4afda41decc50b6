"""Checks a user can run on real models: does speculation change the target's output?

Greedy check: decode at temperature 0 with the drafter and without it and compare token by
token. At the first divergence, report the target's top-two logit gap there: a gap near zero
(a near-tie, where verifying γ+1 positions in one pass and decoding one token at a time may
round differently, especially in bf16) explains a divergence; a clear gap means a fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import torch

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, TokenEvent, TokenKind
from specchat.core.runtime import ModelRuntime, scored

if TYPE_CHECKING:
    from specchat.core.engine import SpeculativeEngine
    from specchat.core.events import Event


class AuditedService(Protocol):
    """What the audit uses of a service (:class:`specchat.service.ChatService`; tests pass a
    small one): its engine (the target, for exact reference distributions) and generation."""

    @property
    def engine(self) -> SpeculativeEngine | None:
        """The loaded target's engine (the audit needs it loaded)."""
        ...

    def generate(self, input_ids: list[int], *, drafter: str, config: GenerationConfig) -> Iterator[Event]:
        """The events of one generation with ``drafter``."""
        ...


def _target(service: AuditedService) -> ModelRuntime:
    """The service's target runtime.

    Raises:
        ValueError: the target is not loaded.
    """
    if service.engine is None:
        raise ValueError("the audit needs the target loaded (service.load())")
    return service.engine.target


@dataclass(frozen=True)
class Divergence:
    """The first position where two greedy outputs differ.

    Attributes:
        index: 0-based index into the generated tokens.
        target_only_token / speculative_token: the two ids there.
        top_tokens: the target's two most likely ids at that position (full-sequence forward).
        top_logits: their logits (float, in the model's dtype's precision).
        gap: top_logits[0] - top_logits[1], >= 0.
    """

    index: int
    target_only_token: int
    speculative_token: int
    top_tokens: tuple[int, int]
    top_logits: tuple[float, float]

    @property
    def gap(self) -> float:
        return self.top_logits[0] - self.top_logits[1]

    def is_near_tie(self, tolerance: float) -> bool:
        """True when the gap is at most ``tolerance``: rounding can explain the divergence."""
        return self.gap <= tolerance


def tie_tolerance(dtype: torch.dtype, top_logit: float) -> float:
    """Default tie tolerance for a divergence: 2 machine epsilons of ``dtype`` at the top
    logit's magnitude, at least 1e-3 (logit units).

    A logit of magnitude m is stored to about eps · m (bf16: eps = 2^-7, so 0.15 at m = 19.5;
    float32: eps = 2^-23). Two kernel orders can round the top two logits each way, so a gap
    below ~2 eps · m is a near-tie; a larger gap at a divergence means a fault.
    """
    return max(1e-3, 2.0 * torch.finfo(dtype).eps * abs(top_logit))


def greedy_tokens(service: AuditedService, input_ids: list[int], drafter: str, max_new_tokens: int, num_speculative_tokens: int = 4):
    """Greedy token ids from ``service.generate`` (a ChatService)."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, num_speculative_tokens=num_speculative_tokens)
    done = [e for e in service.generate(input_ids, drafter=drafter, config=config) if isinstance(e, DoneEvent)][0]
    return list(done.token_ids)


@torch.inference_mode()
def target_logits(target, ids: list[int], num_logits: int) -> torch.Tensor:
    """``[num_logits, V]`` float32 logits of the last positions of ``ids`` from one pass with
    nothing cached: ``target`` is a runtime (:class:`~specchat.core.runtime.ModelRuntime`: its
    cache is started empty and released after, so any kept prefix is dropped) or a transformers
    model (tests' fakes)."""
    if isinstance(target, ModelRuntime):
        target.start(ids, max_positions=len(ids), reuse=False)
        try:
            return scored(target, ids, num_logits).float()
        finally:
            target.release()
    device = next(target.parameters()).device
    return target(torch.tensor([ids], device=device), logits_to_keep=num_logits).logits[0, -num_logits:].float()


def first_divergence(model, input_ids: list[int], reference: list[int], other: list[int]) -> Divergence | None:
    """Compare two generated id lists; at the first difference, measure the target's top-2 gap.

    Args:
        model: the target's runtime, or a transformers model (:func:`target_logits`).
        input_ids: the prompt both outputs continue.
        reference: target-only greedy output; other: the speculative output.
    Returns None when one is a prefix of the other (identical over the common length).
    """
    index = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if index is None:
        return None
    with torch.inference_mode():
        logits = target_logits(model, input_ids + reference[:index], 1)[0]
    top = torch.topk(logits, 2)
    return Divergence(
        index=index,
        target_only_token=reference[index],
        speculative_token=other[index],
        top_tokens=(int(top.indices[0]), int(top.indices[1])),
        top_logits=(float(top.values[0]), float(top.values[1])),
    )


def greedy_check(service: AuditedService, input_ids: list[int], drafter: str, max_new_tokens: int, num_speculative_tokens: int = 4):
    """Greedy with ``drafter`` vs target-only; (reference, speculative, first Divergence or None)."""
    reference = greedy_tokens(service, input_ids, "none", max_new_tokens)
    other = greedy_tokens(service, input_ids, drafter, max_new_tokens, num_speculative_tokens)
    return reference, other, first_divergence(_target(service), input_ids, reference, other)


@dataclass(frozen=True)
class SampledCheck:
    """N next tokens drawn through the speculative path against the exact target distribution.

    Attributes:
        num_samples: N.
        statistic: Pearson chi-square over the bins.
        dof: degrees of freedom (bins − 1).
        p_value: P(χ²_dof >= statistic) under "the engine samples from target_probs".
        rows: (token id, exact probability, observed count), most likely first; tokens whose
            expected count is below 5 are pooled into one bin for the statistic (token id -1).
        outside_support: samples of tokens the target gives probability 0 (must be 0).
        num_drafted: samples in which the drafter proposed that token: its kind was
            ``accepted`` or ``resampled``. The others were ``target`` tokens of rounds that
            drafted nothing (e.g. an n-gram lookup that found nothing): a check with few drafted
            samples says little about verification.
        num_accepted: samples of kind ``accepted``; the other drafted samples were
            ``resampled`` from the residual norm(max(0, p − q)), so both paths are exercised when
            0 < num_accepted < num_drafted.
    """

    num_samples: int
    statistic: float
    dof: int
    p_value: float
    rows: tuple[tuple[int, float, int], ...]
    outside_support: int
    num_drafted: int = 0
    num_accepted: int = 0


@torch.inference_mode()
def exact_next_token_probs(model, input_ids: list[int], config: GenerationConfig) -> torch.Tensor:
    """target_probs for the token after ``input_ids``: ``[V]`` float64 (one full forward;
    ``model``: the target's runtime or a transformers model)."""
    from specchat.core.sampling import logits_to_probs

    logits = target_logits(model, input_ids, 1)
    return logits_to_probs(logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)[0].double().cpu()


def sampled_check(
    service: AuditedService, input_ids: list[int], drafter: str, num_samples: int, config: GenerationConfig, *, progress: bool = False
) -> SampledCheck:
    """Draw the token after ``input_ids`` ``num_samples`` times through the speculative path.

    Each sample generates 2 tokens, so the drafter proposes the first one (γ capped at 1 by the
    budget) and the target accepts it or resamples from the residual: the emitted first token
    must follow target_probs exactly (Leviathan et al. 2023, Theorem 3.5). Seeds are
    ``config.seed + i``. The comparison is Pearson's chi-square; the p-value comes from the
    regularized upper incomplete gamma function (no SciPy needed). ``progress`` shows a tqdm
    bar on stderr.
    """
    from tqdm.auto import tqdm

    exact = exact_next_token_probs(_target(service), input_ids, config)
    counts = torch.zeros_like(exact)
    num_drafted = num_accepted = 0
    for i in tqdm(range(num_samples), desc="sampled check", unit="draw", disable=not progress, leave=False):
        events = list(service.generate(input_ids, drafter=drafter, config=_one_draft_config(config, (config.seed or 0) + i)))
        done = events[-1]
        assert isinstance(done, DoneEvent)
        counts[done.token_ids[0]] += 1
        num_drafted += done.kinds[0] in (TokenKind.ACCEPTED, TokenKind.RESAMPLED)
        num_accepted += done.kinds[0] is TokenKind.ACCEPTED
    return replace(chi_square(exact, counts), num_drafted=num_drafted, num_accepted=num_accepted)


def _one_draft_config(config: GenerationConfig, seed: int) -> GenerationConfig:
    return GenerationConfig(
        num_speculative_tokens=config.num_speculative_tokens,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        seed=seed,
        max_new_tokens=2,
    )


@torch.inference_mode()
def choose_position(
    service: AuditedService, input_ids: list[int], reference: list[int], drafter: str, config: GenerationConfig, max_tries: int = 32
) -> int:
    """The reply position the sampled check should use: informative and really drafted.

    Ranks the positions of the greedy ``reference`` reply by the entropy (nats) of the target's
    warped distribution there (one forward over prompt + reply), most uncertain first. Probes
    the top ``max_tries`` with one speculative round each and keeps those where the drafter
    proposes a token (an n-gram lookup may find nothing). Returns the most uncertain one whose
    probed draft token x has 0.1 <= p(x) <= 0.9, so that both the accept path and the residual
    path run often (a deterministic draft is accepted with probability p(x)); else the most
    uncertain drafted position (many bins for the chi-square); else the most uncertain one.

    Raises:
        ValueError: an empty ``reference``.
    """
    if not reference:
        raise ValueError("the greedy reply is empty: there is no position to sample at")
    from specchat.core.sampling import logits_to_probs

    with torch.inference_mode():
        logits = target_logits(_target(service), input_ids + reference[:-1], len(reference))
    probs = logits_to_probs(logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p).double()
    entropy = -(probs * probs.clamp_min(1e-300).log()).sum(-1)
    order = torch.argsort(entropy, descending=True).tolist()
    first_drafted = None
    for position in order[:max_tries]:
        prefix = input_ids + reference[:position]
        events = list(service.generate(prefix, drafter=drafter, config=_one_draft_config(config, config.seed or 0)))
        first = next(e for e in events if isinstance(e, TokenEvent))
        if first.kind is TokenKind.TARGET:  # no draft at this position
            continue
        p_draft = first.target_prob if first.kind is TokenKind.ACCEPTED else first.rejected_target_prob
        assert p_draft is not None  # a resampled token carries its rejected draft's p
        score = min(p_draft, 1.0 - p_draft)
        if score >= 0.1:
            return position
        if first_drafted is None:
            first_drafted = position
    return order[0] if first_drafted is None else first_drafted


def chi_square(exact: torch.Tensor, counts: torch.Tensor) -> SampledCheck:
    """Pearson chi-square of ``counts`` (``[V]``) against probabilities ``exact`` (``[V]``).

    Bins: every token with expected count >= 5, plus one pooled bin for the rest of the
    support. Tokens outside the support are reported separately (any is a failure).
    """
    n = int(counts.sum())
    expected = exact * n
    support = exact > 0
    big = expected >= 5
    obs_bins = [float(c) for c in counts[big]]
    exp_bins = [float(e) for e in expected[big]]
    rest = support & ~big
    if bool(rest.any()):
        obs_bins.append(float(counts[rest].sum()))
        exp_bins.append(float(expected[rest].sum()))
    statistic = sum((o - e) ** 2 / e for o, e in zip(obs_bins, exp_bins) if e > 0)
    dof = max(len(obs_bins) - 1, 1)
    half = lambda x: torch.tensor(x / 2.0, dtype=torch.float64)  # noqa: E731
    p_value = float(torch.special.gammaincc(half(dof), half(statistic)))
    order = torch.argsort(exact, descending=True)[:10]
    rows = tuple((int(t), float(exact[t]), int(counts[t])) for t in order if exact[t] > 0)
    return SampledCheck(n, statistic, dof, p_value, rows, int(counts[~support].sum()))
