"""The cost side of speculation, counted in one reply: what it spent and what it saved.

Leviathan, Kalman, Matias 2023 (arXiv:2211.17192), Sections 3.3-3.5; restated in ALGORITHM.md.
Speculative decoding makes the target read its weights once per *round* instead of once per
token (a decode step is memory-bound: the weights dominate the bytes read), and pays for it in
arithmetic: each round the target checks γ + 1 positions, of which only the accepted ones and
one more are kept, and the drafter runs γ steps of ĉ target-token units each.

This module counts both sides from a reply's :class:`~specchat.core.events.RoundEvent` stream and puts
the formulas' predictions beside the counts:

* target forward passes: one per round (the verify pass; the prefill is apart), against one per
  committed token for target-only decoding;
* target weight bytes read: passes × the target's weight bytes; the factor saved is
  tokens / rounds, predicted E[N] = (1 − α^(γ+1)) / (1 − α);
* arithmetic in target-token units (one unit = one position through the target, about
  2 FLOPs per matmul weight): Σ_r (γ_r + 1) + ĉ · Σ_r γ_r against one unit per token; the
  multiplier, predicted (1 − α)(γĉ + γ + 1) / (1 − α^(γ+1)) (Theorem 3.11);
* drafter passes and their share of the decode time, drafted tokens thrown away.

ĉ, the drafter's arithmetic per token over the target's, comes from the two models' matmul
parameter counts (:class:`ModelSizes`, as each runtime counts them: ``ModelRuntime.model_size``; attention over the
context is left out of both, which is what "2 FLOPs per weight" ignores). Pure Python: no
tensors, no UI.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from specchat.core import theory
from specchat.core.events import RoundEvent
from specchat.core.runtime import ModelSize  # a runtime reports it (ModelRuntime.model_size)

__all__ = ["ModelSize", "ModelSizes", "Ledger", "count_ledger", "PREFILL_HEAVY"]

PREFILL_HEAVY = 0.5
"""A reply whose prefill took more than this share of its time is called "mostly prefill"."""


@dataclass(frozen=True)
class ModelSizes:
    """The target's and the drafter's sizes (drafter None: n-gram lookup or target only).

    Raises:
        ValueError: a target with no matmul weights.
    """

    target: ModelSize
    drafter: ModelSize | None = None

    def __post_init__(self) -> None:
        if self.target.matmul_params <= 0:
            raise ValueError("the target has no matmul weights to count")
        for name, size in (("target", self.target), ("drafter", self.drafter)):
            if size is not None and (size.matmul_params <= 0 or size.weight_bytes < 0):
                raise ValueError(f"the {name}'s sizes must be positive, got {size}")

    @property
    def flop_ratio(self) -> float:
        """ĉ = drafter matmul weights / target matmul weights (0 with no drafter model)."""
        return 0.0 if self.drafter is None else self.drafter.matmul_params / self.target.matmul_params

    def to_json(self) -> dict[str, Any]:
        return {"target": asdict(self.target), "drafter": None if self.drafter is None else asdict(self.drafter)}

    @classmethod
    def from_json(cls, value: Any) -> ModelSizes | None:
        """From :meth:`to_json`'s dict; None for a missing or malformed value (not whole numbers,
        not positive, infinite)."""

        def size(d: Any) -> ModelSize:
            values = (d["matmul_params"], d["weight_bytes"])
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise TypeError("sizes are whole numbers")
            return ModelSize(*values)

        try:
            drafter = value.get("drafter")
            return cls(size(value["target"]), None if drafter is None else size(drafter))
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
            return None


@dataclass(frozen=True)
class Ledger:
    """What one reply's decoding spent and saved, counted from its rounds, with predictions.

    Counts (exact, from the events): ``num_tokens`` committed tokens, ``target_passes`` (= rounds),
    ``drafter_passes`` (drafter forward passes), ``num_drafted``, ``num_thrown_away`` (drafted
    and not committed: rejected, after a rejection, or after a stop), ``target_positions``
    (positions the target's verify passes computed, Σ (γ_r + 1)).

    Times (measured, ms): ``decode_ms``, ``draft_ms``; ``prefill_ms`` when known.

    Predictions (from the measured α and the γ of each round, None before α is known):
    ``reads_factor_predicted`` (tokens per target pass, E[N] averaged as run) and
    ``arithmetic_predicted``.
    """

    num_tokens: int
    target_passes: int
    drafter_passes: int
    num_drafted: int
    num_accepted: int
    target_positions: int
    decode_ms: float
    draft_ms: float
    prefill_ms: float | None
    alpha: float | None
    flop_ratio: float | None
    sizes: ModelSizes | None
    reads_factor_predicted: float | None
    arithmetic_predicted: float | None
    num_prefilled: int | None = None  # prompt tokens the prefill computed (the rest came from a kept cache)
    drafter_prefill_ms: float | None = None  # the drafter's part of prefill_ms (reading the prompt into its cache)
    num_prompt_tokens: int | None = None

    # -- reads ---------------------------------------------------------------------------
    @property
    def target_only_passes(self) -> int:
        """Target-only decoding runs one target pass per token."""
        return self.num_tokens

    @property
    def reads_factor(self) -> float | None:
        """Target weight reads saved: target-only passes / target passes (= tokens per round)."""
        return self.num_tokens / self.target_passes if self.target_passes else None

    @property
    def target_bytes(self) -> int | None:
        """Target weight bytes read while decoding: passes × the target's weight bytes."""
        return None if self.sizes is None else self.target_passes * self.sizes.target.weight_bytes

    @property
    def target_only_bytes(self) -> int | None:
        return None if self.sizes is None else self.num_tokens * self.sizes.target.weight_bytes

    @property
    def drafter_bytes(self) -> int | None:
        """Drafter weight bytes read: its passes × its weight bytes (0 with no drafter model)."""
        if self.sizes is None:
            return None
        return 0 if self.sizes.drafter is None else self.drafter_passes * self.sizes.drafter.weight_bytes

    @property
    def bytes_factor(self) -> float | None:
        """All weight bytes read (target + drafter) against target-only: below 1 is a saving."""
        t, d, base = self.target_bytes, self.drafter_bytes, self.target_only_bytes
        return None if t is None or d is None or not base else (t + d) / base

    # -- arithmetic ----------------------------------------------------------------------
    @property
    def arithmetic_units(self) -> float | None:
        """Work in target-token units: target positions + ĉ × drafter passes (one pass per drafted
        token for a model drafter; a lookup round of the hybrid drafts without one)."""
        if self.flop_ratio is None:
            return None
        return self.target_positions + self.flop_ratio * self.drafter_passes

    @property
    def arithmetic(self) -> float | None:
        """The arithmetic multiplier as counted: work units / tokens (target-only: 1)."""
        units = self.arithmetic_units
        return None if units is None or not self.num_tokens else units / self.num_tokens

    # -- drafting ------------------------------------------------------------------------
    @property
    def num_thrown_away(self) -> int:
        return self.num_drafted - self.num_accepted

    @property
    def draft_share(self) -> float | None:
        """Share of the decode time spent in the drafter (measured)."""
        return self.draft_ms / self.decode_ms if self.decode_ms > 0 else None

    # -- the limits ----------------------------------------------------------------------
    @property
    def prefill_share(self) -> float | None:
        """prefill / (prefill + decode): the part speculation cannot speed up."""
        if self.prefill_ms is None or self.prefill_ms + self.decode_ms <= 0:
            return None
        return self.prefill_ms / (self.prefill_ms + self.decode_ms)

    @property
    def mostly_prefill(self) -> bool:
        share = self.prefill_share
        return share is not None and share > PREFILL_HEAVY

    def summary(self) -> dict[str, Any]:
        """The ledger as a flat JSON-friendly dict (counts, ms, factors; None where unknown)."""
        return {
            "num_tokens": self.num_tokens,
            "target_passes": self.target_passes,
            "target_only_passes": self.target_only_passes,
            "reads_factor": self.reads_factor,
            "reads_factor_predicted": self.reads_factor_predicted,
            "target_bytes": self.target_bytes,
            "target_only_bytes": self.target_only_bytes,
            "drafter_passes": self.drafter_passes,
            "drafter_bytes": self.drafter_bytes,
            "bytes_factor": self.bytes_factor,
            "draft_share": self.draft_share,
            "flop_ratio": self.flop_ratio,
            "arithmetic_units": self.arithmetic_units,
            "arithmetic": self.arithmetic,
            "arithmetic_predicted": self.arithmetic_predicted,
            "num_drafted": self.num_drafted,
            "num_thrown_away": self.num_thrown_away,
            "prefill_ms": self.prefill_ms,
            "num_prefilled": self.num_prefilled,
            "drafter_prefill_ms": self.drafter_prefill_ms,
            "decode_ms": self.decode_ms,
        }

    def line(self) -> str:
        """One line of text for the CLI."""
        f = lambda v, spec="{:.2f}×": "n/a" if v is None else spec.format(v)  # noqa: E731
        saved = (f"{f(self.reads_factor)} fewer weight reads" if self.reads_factor is None or self.reads_factor >= 1.005
                 else "as many weight reads as target-only")
        parts = [
            f"{self.target_passes} target passes for {self.num_tokens} tokens ({saved}, E[N] predicts "
            f"{f(self.reads_factor_predicted)})",
        ]
        if self.drafter_passes:
            parts.append(f"{self.drafter_passes} drafter passes ({f(self.draft_share, '{:.0%}')} of decode time)")
        parts.append(f"arithmetic {f(self.arithmetic)} target-only (predicted {f(self.arithmetic_predicted)}, "
                     f"ĉ={f(self.flop_ratio, '{:.2f}')})")
        if self.num_drafted:
            parts.append(f"{self.num_thrown_away} of {self.num_drafted} drafts thrown away")
        if self.prefill_ms is not None:
            split = (f" (the drafter's part {self.drafter_prefill_ms / 1000:.2f} s)" if self.drafter_prefill_ms else "")
            parts.append(f"prefill {self.prefill_ms / 1000:.2f} s{split}, decode {self.decode_ms / 1000:.2f} s"
                         + (" (mostly prefill: speculation speeds up only decoding)" if self.mostly_prefill else ""))
        return "ledger: " + "; ".join(parts)


def count_ledger(
    rounds: Iterable[RoundEvent],
    *,
    sizes: ModelSizes | None = None,
    alpha: float | None = None,
    prefill_ms: float | None = None,
    num_prefilled: int | None = None,
    num_prompt_tokens: int | None = None,
    drafter_prefill_ms: float | None = None,
) -> Ledger:
    """Count a reply's ledger from its rounds.

    Args:
        rounds: the reply's RoundEvents (in any order; a round that drafted nothing, such as a
            timing round, counts as one target step that commits its tokens).
        sizes: the two models' sizes; without them ĉ, bytes and the arithmetic are None.
        alpha: the reply's acceptance rate α (accepted / judged drafts) for the predictions.
        prefill_ms: the reply's prefill time, milliseconds.
        num_prefilled / num_prompt_tokens: prompt tokens the prefill computed, of how many
            (``DoneEvent.num_prefilled``: the rest were reused from the conversation's kept cache).
        drafter_prefill_ms: the drafter's part of the prefill (``DoneEvent.drafter_prefill_ms``).

    Returns:
        The :class:`Ledger`. Predictions per round as run: a round that drafted γ_r tokens is
        predicted to commit E[N](α, γ_r) tokens for γ_r ĉ + γ_r + 1 units of work; one that
        drafted nothing commits 1 token for 1 unit.
    """
    rounds = list(rounds)
    flop_ratio = None if sizes is None else sizes.flop_ratio
    if sizes is not None and sizes.drafter is None and any(r.draft_steps for r in rounds):
        flop_ratio = None  # a drafter model ran, but its size was not recorded: ĉ unknown
    tokens_pred = units_pred = 0.0
    for r in rounds:
        if r.num_drafted == 0 or alpha is None:
            tokens_pred += 1.0
            units_pred += 1.0
        else:
            tokens = theory.expected_tokens_per_round(alpha, r.num_drafted)
            tokens_pred += tokens
            units_pred += theory.flop_multiplier(alpha, r.num_drafted, flop_ratio or 0.0) * tokens
    predicted = alpha is not None and any(r.num_drafted for r in rounds)
    return Ledger(
        num_tokens=sum(r.num_committed for r in rounds),
        target_passes=len(rounds),
        drafter_passes=sum(r.draft_steps for r in rounds),
        num_drafted=sum(r.num_drafted for r in rounds),
        num_accepted=sum(r.num_accepted for r in rounds),
        target_positions=sum(r.num_drafted + 1 for r in rounds),
        decode_ms=sum(r.round_ms for r in rounds),
        draft_ms=sum(r.draft_ms for r in rounds),
        prefill_ms=prefill_ms,
        alpha=alpha,
        flop_ratio=flop_ratio,
        sizes=sizes,
        reads_factor_predicted=tokens_pred / len(rounds) if predicted else None,
        arithmetic_predicted=units_pred / tokens_pred if predicted and flop_ratio is not None else None,
        num_prefilled=num_prefilled,
        num_prompt_tokens=num_prompt_tokens,
        drafter_prefill_ms=drafter_prefill_ms,
    )
