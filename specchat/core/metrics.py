"""Fold the engine's events into running statistics: α, acceptance by position, c, speed.

Pure Python, no tensors and no UI: the app, the CLI and the benchmark all read the same
numbers from here. Formulas for the predictions live in :mod:`specchat.core.theory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.core import theory
from specchat.core.costs import BreakEven, CostEstimator
from specchat.core.events import DoneEvent, Event, RoundEvent, TokenEvent, TokenKind


@dataclass
class SpeculationMetrics:
    """Running statistics of one generation (or several, if fed several streams).

    Every speed figure is measured like for like, in the stream itself (ALGORITHM.md): the
    target-only step time t₁ comes from the rounds of this stream that drafted nothing (every
    round of the drafter ``none``, n-gram misses, and the timing rounds the engine inserts with
    ``GenerationConfig.measure_speedup``), never from a timing taken at another moment.

    Feed every event to :meth:`update`; read the properties at any time.
    """

    rounds: list[RoundEvent] = field(default_factory=list)
    kind_counts: dict[str, int] = field(
        default_factory=lambda: {k.value: 0 for k in TokenKind}
    )
    num_tokens: int = 0
    done: DoneEvent | None = None
    costs: CostEstimator = field(default_factory=CostEstimator)

    def update(self, event: Event) -> None:
        """Add one event. Token events count tokens; round events carry the timings."""
        if isinstance(event, TokenEvent):
            self.num_tokens += 1
            self.kind_counts[event.kind.value] += 1
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
            self.costs.update(event)
        elif isinstance(event, DoneEvent):
            self.done = event

    # ---- acceptance ---------------------------------------------------------------------
    @property
    def num_rounds(self) -> int:
        return len(self.rounds)

    @property
    def num_drafted(self) -> int:
        return sum(r.num_drafted for r in self.rounds)

    @property
    def num_accepted(self) -> int:
        return sum(r.num_accepted for r in self.rounds)

    @property
    def num_verified(self) -> int:
        """Draft positions the target actually judged: each round's accepted drafts plus the
        first rejected one (``len(accepted_mask)``). Drafts after the first rejection are
        discarded unjudged, and so are drafts after a stop."""
        return sum(_verified(r) for r in self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        """α: accepted drafts / judged draft positions; None before any draft.

        This is the estimate of the per-position acceptance probability E[β] that E[N] and
        S(γ) assume (the maximum-likelihood estimate when positions are independent). Dividing
        by *proposed* drafts instead would count the unjudged drafts after a rejection as
        rejections and read low: at a true α of 0.8 and γ = 4 it gives 0.59.
        """
        verified = self.num_verified
        return self.num_accepted / verified if verified else None

    @property
    def accepted_per_drafted(self) -> float | None:
        """accepted drafts / proposed drafts: the share of drafting work that was kept."""
        drafted = self.num_drafted
        return self.num_accepted / drafted if drafted else None

    def acceptance_rate_per_round(self) -> list[float | None]:
        """accepted / judged positions for each round (None for rounds that drafted nothing)."""
        return [r.num_accepted / _verified(r) if r.num_drafted else None for r in self.rounds]

    def cumulative_acceptance_rate(self) -> list[float | None]:
        """α after each round (None until the first draft)."""
        out: list[float | None] = []
        acc = verified = 0
        for r in self.rounds:
            acc += r.num_accepted
            verified += _verified(r)
            out.append(acc / verified if verified else None)
        return out

    def acceptance_by_position(self) -> list[tuple[int, int]]:
        """For each draft position i (0-based): (times accepted, times reached).

        Position i is *reached* in a round that drafted more than i tokens and accepted the
        first i; it is accepted when the round accepted more than i. accepted / reached is the
        conditional acceptance probability β_i at that position.
        """
        longest = max((r.num_drafted for r in self.rounds), default=0)
        counts = [[0, 0] for _ in range(longest)]
        for r in self.rounds:
            for i in range(_verified(r)):
                counts[i][1] += 1
                if i < r.num_accepted:
                    counts[i][0] += 1
        return [(a, n) for a, n in counts]

    @property
    def mean_tokens_per_round(self) -> float | None:
        return self.num_tokens / self.num_rounds if self.rounds else None

    @property
    def mean_num_speculative_tokens(self) -> float | None:
        """Mean γ actually drafted over rounds that drafted anything."""
        drafting = [r.num_drafted for r in self.rounds if r.num_drafted]
        return sum(drafting) / len(drafting) if drafting else None

    # ---- timing -------------------------------------------------------------------------
    @property
    def decode_ms(self) -> float:
        """Decode time of all rounds so far (prefill excluded; Σ RoundEvent.round_ms), ms."""
        return sum(r.round_ms for r in self.rounds)

    @property
    def tokens_per_s(self) -> float | None:
        """Committed tokens per second of decoding (prefill excluded)."""
        return self.num_committed / (self.decode_ms / 1000.0) if self.decode_ms > 0 else None

    @property
    def num_committed(self) -> int:
        """Tokens committed by the rounds seen so far (equals num_tokens between rounds)."""
        return sum(r.num_committed for r in self.rounds)

    @property
    def draft_step_ms(self) -> float | None:
        """Mean wall time of one drafter forward pass, milliseconds (None for n-gram/none)."""
        steps = sum(r.draft_steps for r in self.rounds)
        return sum(r.draft_ms for r in self.rounds) / steps if steps else None

    @property
    def verify_ms(self) -> float | None:
        """Mean wall time of one target verification pass, milliseconds."""
        return sum(r.verify_ms for r in self.rounds) / len(self.rounds) if self.rounds else None

    @property
    def num_target_only_rounds(self) -> int:
        """Rounds that drafted nothing: each one is a target-only step that timed t₁."""
        return sum(1 for r in self.rounds if r.num_drafted == 0)

    @property
    def num_timing_rounds(self) -> int:
        """Target-only rounds the engine inserted only to time t₁ (``RoundEvent.timing``)."""
        return sum(1 for r in self.rounds if r.timing)

    @property
    def num_paused_rounds(self) -> int:
        """Target-only rounds adaptive γ chose because no γ paid (``RoundEvent.drafting_paused``)."""
        return sum(1 for r in self.rounds if r.drafting_paused)

    def break_even(self) -> BreakEven | None:
        """γ = 1's break-even at this reply's measured costs (:class:`~specchat.core.costs.BreakEven`:
        α* = c + v(2)/t₁ − 1 when it lies in (0, 1); Leviathan et al. 2023, Equation 1, against
        the measured round time). None until t₁ and a drafting round are timed."""
        return self.costs.break_even(1)

    @property
    def paused_speedup(self) -> float | None:
        """The best speedup adaptive γ predicted when it last paused drafting in this reply
        (``RoundEvent.paused_speedup``); None if it never paused."""
        return next((r.paused_speedup for r in reversed(self.rounds) if r.paused_speedup is not None), None)

    def pause_note(self) -> str | None:
        """Why drafting paused in this reply, in one sentence (:func:`specchat.core.evidence.pause_words`);
        None when it did not pause."""
        from specchat.core import evidence

        return evidence.pause_words(self)

    def verify_cost_curve(self) -> list[tuple[int, float, int]] | None:
        """The verify-cost curve T(k)/T(1) as measured in this stream: for each k = γ + 1 that
        a drafting round verified, ``(k, mean (round_ms − draft_ms) / t₁, rounds)``, k ascending,
        and ``(1, 1.0, n)`` for the n target-only steps that timed t₁. The textbook assumption
        (Leviathan et al. 2023, §3.3) is 1 for every k; ``costs.verify_ms(k) / t₁`` is the
        straight line the predictions use. None until t₁ was timed.

        A round's time less its drafting is its verify pass plus bookkeeping, as in
        :class:`~specchat.core.costs.CostEstimator`; rounds cut by a stop count at the k they
        verified."""
        t1 = self.target_step_ms
        if not t1:
            return None
        sums: dict[int, list[float]] = {}
        for r in self.rounds:
            if r.num_drafted:
                sums.setdefault(r.num_drafted + 1, []).append((r.round_ms - r.draft_ms) / t1)
        points = [(1, 1.0, self.num_target_only_rounds)]
        points += [(k, sum(v) / len(v), len(v)) for k, v in sorted(sums.items())]
        return points

    @property
    def target_step_ms(self) -> float | None:
        """t₁: mean time of a target-only decode step in this stream (its rounds that drafted
        nothing), milliseconds; None if every round drafted."""
        return self.costs.target_step_ms

    @property
    def target_only_tokens_per_s(self) -> float | None:
        """1000 / t₁: what target-only decoding reached during this stream, tokens/s."""
        t1 = self.target_step_ms
        return 1000.0 / t1 if t1 else None

    @property
    def cost_ratio(self) -> float | None:
        """c = d / t₁: drafter milliseconds per drafted token over one target-only step, both
        timed in this stream (0 for a lookup that costs nothing measurable); None until both
        were measured."""
        return self.costs.cost_ratio

    @property
    def measured_speedup(self) -> float | None:
        """Committed tokens × t₁ / decode time: how much faster this stream decoded than
        target-only steps timed during it. 1.0 for target-only decoding (up to the rounds'
        bookkeeping). None until a target-only round was timed."""
        t1, decode_ms = self.target_step_ms, self.decode_ms
        if t1 is None or decode_ms <= 0:
            return None
        return self.num_committed * t1 / decode_ms

    @property
    def predicted_speedup(self) -> float | None:
        """The speedup the measured α and costs predict for the rounds as run:
        Σ_r E[N](α, γ_r) · t₁ / Σ_r T(γ_r), with T(γ) = γ·d + v(γ + 1) for a round that drafted
        γ_r tokens and E[N] = 1, T = t₁ for a round that drafted nothing
        (:mod:`specchat.core.costs`). For a fixed γ and no target-only rounds this is
        E[N](γ) · t₁ / (γ·d + v(γ + 1)); with v(γ + 1) = t₁, Leviathan's S(γ). None until α,
        t₁, d and v(n) were measured."""
        alpha, t1 = self.acceptance_rate, self.target_step_ms
        gammas = [r.num_drafted for r in self.rounds if r.num_drafted > 0]
        if alpha is None or t1 is None or not gammas:
            return None
        tokens, time_ms = float(self.num_target_only_rounds), self.num_target_only_rounds * t1
        for gamma in gammas:
            round_ms = self.costs.round_ms(gamma)
            if round_ms is None:
                return None
            tokens += theory.expected_tokens_per_round(alpha, gamma)
            time_ms += round_ms
        return tokens * t1 / time_ms if time_ms > 0 else None

    def predicted_speedup_curve(self, max_gamma: int) -> list[float] | None:
        """S(γ) = E[N](α, γ) · t₁ / (γ·d + v(γ + 1)) for γ = 1..max_gamma, with this stream's
        measured α and costs: the curve of the theory chart, whose argmax is the γ the adaptive
        controller's formula picks. None until α, t₁, d and v(n) were measured."""
        alpha = self.acceptance_rate
        if alpha is None:
            return None
        curve = [self.costs.predicted_speedup(theory.expected_tokens_per_round(alpha, g), g)
                 for g in range(1, max_gamma + 1)]
        speedups = [s for s in curve if s is not None]
        return None if len(speedups) < len(curve) else speedups

    def summary(self) -> dict[str, float | int | None]:
        """The headline numbers as a flat JSON-friendly dict."""
        return {
            "num_tokens": self.num_tokens,
            "num_rounds": self.num_rounds,
            "num_drafted": self.num_drafted,
            "num_accepted": self.num_accepted,
            "num_resampled": self.kind_counts[TokenKind.RESAMPLED.value],
            "num_bonus": self.kind_counts[TokenKind.BONUS.value],
            "num_target": self.kind_counts[TokenKind.TARGET.value],
            "acceptance_rate": self.acceptance_rate,
            "accepted_per_drafted": self.accepted_per_drafted,
            "mean_tokens_per_round": self.mean_tokens_per_round,
            "tokens_per_s": self.tokens_per_s,
            "decode_ms": self.decode_ms,
            "prefill_ms": self.done.prefill_ms if self.done else None,
            "draft_step_ms": self.draft_step_ms,
            "verify_ms": self.verify_ms,
            "target_step_ms": self.target_step_ms,
            "num_target_only_rounds": self.num_target_only_rounds,
            "num_timing_rounds": self.num_timing_rounds,
            "num_paused_rounds": self.num_paused_rounds,
            "cost_ratio": self.cost_ratio,
            "speedup": self.measured_speedup,
            "speedup_half_width": self._speedup_evidence().half_width,
            "speedup_shown": self._speedup_evidence().shown,
            "speedup_predicted": self.predicted_speedup,
        }

    def _speedup_evidence(self):
        from specchat.core import evidence

        return evidence.measured_speedup(self)


def _verified(r: RoundEvent) -> int:
    """Draft positions the target judged in round ``r`` (see ``RoundEvent.accepted_mask``)."""
    return len(r.accepted_mask)
