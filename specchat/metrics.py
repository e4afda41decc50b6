"""Fold the engine's events into running statistics: α, acceptance by position, c, speed.

Pure Python, no tensors and no UI: the app, the CLI and the benchmark all read the same
numbers from here. Formulas for the predictions live in :mod:`specchat.theory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat import theory
from specchat.events import DoneEvent, Event, RoundEvent, TokenEvent, TokenKind


@dataclass
class SpeculationMetrics:
    """Running statistics of one generation (or several, if fed several streams).

    Args:
        baseline_tokens_per_s: target-only decode speed measured on this machine (tokens/s),
            used for the measured speedup and as the target step time in c. None if unknown;
            then c uses the mean verify time as the target step time.

    Feed every event to :meth:`update`; read the properties at any time.
    """

    baseline_tokens_per_s: float | None = None
    rounds: list[RoundEvent] = field(default_factory=list)
    kind_counts: dict[str, int] = field(
        default_factory=lambda: {k.value: 0 for k in TokenKind}
    )
    num_tokens: int = 0
    done: DoneEvent | None = None
    _elapsed_offset_ms: float = 0.0
    _elapsed_ms: float = 0.0

    def update(self, event: Event) -> None:
        """Add one event. Token events count tokens; round events carry the timings."""
        if isinstance(event, TokenEvent):
            self.num_tokens += 1
            self.kind_counts[event.kind.value] += 1
        elif isinstance(event, RoundEvent):
            if event.round_index == 0 and self.rounds:
                # a new stream: keep its elapsed time after the previous streams'
                self._elapsed_offset_ms = self._elapsed_ms
            self.rounds.append(event)
            self._elapsed_ms = self._elapsed_offset_ms + event.elapsed_ms
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
        """Wall time of all rounds so far (prefill excluded), milliseconds."""
        return self._elapsed_ms

    @property
    def tokens_per_s(self) -> float | None:
        """Committed tokens per second of decoding (prefill excluded)."""
        return self.num_tokens / (self.decode_ms / 1000.0) if self.decode_ms > 0 else None

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
    def target_step_ms(self) -> float | None:
        """Time of one target step: from the baseline if known, else the mean verify time."""
        if self.baseline_tokens_per_s:
            return 1000.0 / self.baseline_tokens_per_s
        return self.verify_ms

    @property
    def cost_ratio(self) -> float | None:
        """c = drafter step time / target step time (0 for a model-free drafter)."""
        target = self.target_step_ms
        if target is None or not self.num_drafted:
            return None
        draft = self.draft_step_ms
        if draft is None:  # n-gram lookup: drafting time is spread over rounds, not steps
            return sum(r.draft_ms for r in self.rounds) / max(self.num_drafted, 1) / target
        return draft / target

    @property
    def measured_speedup(self) -> float | None:
        """tokens_per_s / baseline_tokens_per_s; None without a baseline."""
        tps = self.tokens_per_s
        if tps is None or not self.baseline_tokens_per_s:
            return None
        return tps / self.baseline_tokens_per_s

    @property
    def predicted_speedup(self) -> float | None:
        """S(γ) from the measured α, the mean drafted γ and the measured c (theory.py)."""
        alpha, gamma, c = self.acceptance_rate, self.mean_num_speculative_tokens, self.cost_ratio
        if alpha is None or gamma is None or c is None:
            return None
        g = max(1, round(gamma))
        return theory.predicted_speedup(alpha, g, c)

    def summary(self) -> dict[str, float | int | None]:
        """The headline numbers as a flat JSON-friendly dict."""
        return {
            "num_tokens": self.num_tokens,
            "num_rounds": self.num_rounds,
            "num_drafted": self.num_drafted,
            "num_accepted": self.num_accepted,
            "num_resampled": self.kind_counts[TokenKind.RESAMPLED.value],
            "num_bonus": self.kind_counts[TokenKind.BONUS.value],
            "acceptance_rate": self.acceptance_rate,
            "accepted_per_drafted": self.accepted_per_drafted,
            "mean_tokens_per_round": self.mean_tokens_per_round,
            "tokens_per_s": self.tokens_per_s,
            "decode_ms": self.decode_ms,
            "prefill_ms": self.done.prefill_ms if self.done else None,
            "draft_step_ms": self.draft_step_ms,
            "verify_ms": self.verify_ms,
            "cost_ratio": self.cost_ratio,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
        }


def _verified(r: RoundEvent) -> int:
    """Draft positions the target judged in round ``r`` (see ``RoundEvent.accepted_mask``)."""
    return len(r.accepted_mask)
