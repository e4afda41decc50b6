"""What a reply's figures can claim, and the words that claim it: one place, checked.

Every figure the page, the ledger, the CLI and the terminal print about a reply (a measured
speedup, a cost ratio, a prediction, a break-even, a best γ) rests on a sample of this reply's
rounds. This module decides whether the sample can carry the claim and builds the one sentence
that states it, so that no two places say it differently and no sentence contradicts the
numbers beside it (``tests/test_evidence.py`` sweeps the builders over a grid of α, costs and
sample sizes and checks each claim against the arithmetic):

* a **measured speedup** S = N·t₁/D is as uncertain as t₁, the mean of the reply's target-only
  steps (N tokens and the decode time D are counted exactly): it is shown with its 95 % interval
  (Student's t over the steps' spread) once :data:`MIN_TARGET_STEPS` steps were timed and the
  interval is within ±:data:`MAX_HALF_WIDTH`; until then it is held back ("timing: 2 target steps
  of the 3 needed": the same words live and once the reply has ended);
* a **break-even** ("drafting pays from α ≥ …") needs :data:`MIN_TARGET_STEPS` target steps and
  :data:`MIN_DRAFTING_ROUNDS` timed drafting rounds, and timings that agree with each other (a
  verify pass timed below :data:`MIN_VERIFY_STEPS` target steps means the load changed during
  the reply); it never states a threshold of 1 or more as a condition on α, and never says "no
  acceptance rate can pay" of a reply whose measured speedup is above 1;
* a **prediction** or a **best γ** needs :data:`MIN_JUDGED` judged drafts as well.

Pure Python: no tensors, no UI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.core import theory
from specchat.core.costs import BreakEven

MIN_TARGET_STEPS = 3
MAX_HALF_WIDTH = 0.10
MIN_DRAFTING_ROUNDS = 3
MIN_JUDGED = 10
MIN_VERIFY_STEPS = 0.8
SHOWN_MAX_GAMMA = 12  # the range of γ a best γ is sought in (the app's default γ_max), chart and ledger alike

# Student's t, two-sided 95 % (0.975 quantile), by degrees of freedom; between entries the
# smaller df's (larger, so conservative) value is used, beyond the table the normal 1.96.
_T975 = ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306),
         (9, 2.262), (10, 2.228), (12, 2.179), (15, 2.131), (20, 2.086), (25, 2.060), (30, 2.042), (40, 2.021),
         (60, 2.000), (120, 1.980))


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom (table, conservative)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    value = 1.96
    for d, t in reversed(_T975):
        if df >= d:
            return t if df <= 120 else value
    return value


@dataclass(frozen=True)
class MeasuredSpeedup:
    """A reply's measured speedup with the sample behind it.

    Attributes:
        value: N·t₁/D, or None before a target step was timed.
        num_steps: target-only steps timed in the reply (t₁'s sample).
        half_width: the relative half width of the 95 % interval of t₁ (and so of S), or None
            before two steps.
    """

    value: float | None
    num_steps: int
    half_width: float | None

    @property
    def shown(self) -> bool:
        """Whether the sample carries the figure (:data:`MIN_TARGET_STEPS`, :data:`MAX_HALF_WIDTH`)."""
        return (self.value is not None and self.num_steps >= MIN_TARGET_STEPS and self.half_width is not None
                and self.half_width <= MAX_HALF_WIDTH)

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.value is None or self.half_width is None:
            return None
        return self.value * (1 - self.half_width), self.value * (1 + self.half_width)

    def short(self) -> str:
        """``1.21× ±0.05`` when shown, else ``–``."""
        if not self.shown or self.value is None or self.half_width is None:  # shown: neither is None
            return "–"
        return f"{self.value:.2f}× ±{self.value * self.half_width:.2f}"

    def above_one(self) -> bool:
        """Whether the figure is shown and its whole 95 % interval lies above 1 (a measured gain)."""
        interval = self.interval
        return self.shown and interval is not None and interval[0] > 1.0

    def basis(self) -> str:
        """What the figure rests on: ``12 target-only steps timed in this reply`` or why it is held
        back (``timing: 2 target steps of the 3 needed``, ``… too scattered, 95 % interval ±14.2 %, …``)."""
        steps = f"{self.num_steps} target step{'s' if self.num_steps != 1 else ''}"
        if self.value is None:
            return "no target-only step timed in this reply"
        if self.num_steps < MIN_TARGET_STEPS:
            return f"timing: {steps} of the {MIN_TARGET_STEPS} needed"
        if self.half_width is None:
            return f"timing: {steps} with no spread to judge them by"
        if self.half_width > MAX_HALF_WIDTH:  # (one decimal: "±10 %" over a ±10 % limit read as a contradiction)
            return (f"timing: {steps} too scattered, 95 % interval ±{math.ceil(self.half_width * 1000) / 10:.1f} %, over the "
                    f"±{MAX_HALF_WIDTH * 100:.0f} % a speedup is shown within (a busy machine?)")
        return f"against {steps} timed in this reply (95 % interval)"

    def text(self) -> str:
        """``1.21× ±0.05 against 12 target steps timed in this reply (95 % interval)`` or the basis alone."""
        return f"{self.short()} {self.basis()}" if self.shown else f"speedup held back ({self.basis()})"


def measured_speedup(metrics) -> MeasuredSpeedup:
    """:class:`MeasuredSpeedup` of a :class:`~specchat.core.metrics.SpeculationMetrics`."""
    steps = metrics.num_target_only_rounds
    rel_se = metrics.costs.target_step_rel_se
    half = None if rel_se is None or steps < 2 else t975(steps - 1) * rel_se
    return MeasuredSpeedup(metrics.measured_speedup, steps, half)


def at_least(value: float) -> str:
    """An α threshold below 1 rounded up (a "from α ≥ x" stays true), with as many digits past two
    as it takes (up to six) never to read 1.00; "1" when even six round up to it."""
    for digits in range(2, 7):
        scale = 10**digits
        rounded = math.ceil(value * scale - 1e-9) / scale
        if rounded < 1.0:
            return f"{rounded:.{digits}f}"
    return "1"


def break_even_sentence(even: BreakEven, *, measured: MeasuredSpeedup | None = None) -> str:
    """The break-even in words, with the costs it rests on, e.g. "drafting one token costs
    c = 0.10 target steps and the verify pass over 2 positions 1.05, so drafting γ = 1 pays from
    α ≥ 0.15". "No acceptance rate can pay" only when the round costs at least γ + 1 target steps
    and no measured speedup above 1 says otherwise."""
    gamma = even.num_speculative_tokens
    costs = (f"drafting one token costs c = {even.draft_cost:.2f} target steps and the verify pass over "
             f"{gamma + 1} positions {even.verify_cost:.2f}")
    if even.never_pays:
        if measured is not None and measured.above_one():
            return (f"{costs}: a round of γ = {gamma} costs {even.round_cost:.2f} target steps by these averages, yet "
                    f"the reply measured {measured.short()}: its timed rounds disagree on what a round costs")
        return (f"{costs}: a round of γ = {gamma} costs {even.round_cost:.2f} target steps and commits at most "
                f"{gamma + 1} tokens, so no acceptance rate can pay")
    if even.pays_always:
        return (f"{costs}: a round of γ = {gamma} costs {even.round_cost:.2f} target steps, no more than one, "
                f"so drafting pays at any acceptance rate")
    threshold = even.acceptance
    assert threshold is not None  # None only when it never pays or always pays (both answered above)
    if at_least(threshold) == "1":  # below 1 by less than 10⁻⁶: no acceptance rate short of every draft
        return (f"{costs}: a round of γ = {gamma} costs {even.round_cost:.2f} target steps, so it pays only if every "
                f"draft is accepted")
    if threshold >= 0.99:
        return f"{costs}, so drafting γ = {gamma} pays only if nearly every draft is accepted (α ≥ {at_least(threshold)})"
    return f"{costs}, so drafting γ = {gamma} pays from α ≥ {at_least(threshold)}"


def break_even_words(metrics) -> str | None:
    """The break-even of the γ this reply drafted (its mean, rounded) at this reply's costs, when
    its sample carries one; else why not; None when the reply drafted nothing."""
    return _break_even(metrics)[0]


def _break_even(metrics) -> tuple[str | None, BreakEven | None]:
    """(:func:`break_even_words`, the :class:`BreakEven` it states in numbers, or None where it
    states none: too few timed rounds, timings that disagree, nothing drafted)."""
    drafting = sum(1 for r in metrics.rounds if r.num_drafted)
    if not drafting:
        return None, None
    steps = metrics.num_target_only_rounds
    if steps < MIN_TARGET_STEPS or drafting < MIN_DRAFTING_ROUNDS:
        return (f"too few timed rounds to say where drafting pays ({steps} target step{'s' * (steps != 1)}, "
                f"{drafting} drafting round{'s' * (drafting != 1)})"), None
    gamma = max(1, round(metrics.mean_num_speculative_tokens))  # the γ this reply drafted
    even = metrics.costs.break_even(gamma)
    if even is None:
        return None, None
    if even.verify_cost < MIN_VERIFY_STEPS:
        return (f"the timings disagree (a pass over {gamma + 1} positions timed at {even.verify_cost:.2f} target "
                "steps): the machine's load changed during the reply, so no break-even is given"), None
    return break_even_sentence(even, measured=measured_speedup(metrics)), even


def pause_words(metrics) -> str | None:
    """Why drafting paused in this reply, in one sentence, for the page and the CLI alike; None
    when it did not pause. The controller judges each drafting source (a lookup's match length,
    the hybrid's lookup or model) on its own latest rounds, so a pause is its prediction for the
    source at hand, which this reply's pooled α need not match."""
    paused = metrics.num_paused_rounds
    if not paused:
        return None
    note = f"drafting paused in {paused} of {metrics.num_rounds} rounds"
    predicted = metrics.paused_speedup
    if predicted is not None:
        note += f" (where it paused, its controller predicted at best {predicted:.2f}× for every γ)"
    words, even = _break_even(metrics)
    if not words:
        return note
    alpha = metrics.acceptance_rate
    if even is not None and even.acceptance is not None and alpha is not None and alpha >= even.acceptance:
        # the reply's pooled α clears the break-even, yet it paused: say why, or it reads as a contradiction
        words += (f"; this reply's α {alpha:.2f} clears that over all its drafts, but the controller pauses on the "
                  "latest rounds of the drafting source at hand alone (a hybrid's lookup and model are judged apart), "
                  "and there it predicted a loss")
    return f"{note}: here {words}"



def best_gamma(metrics, max_gamma: int = SHOWN_MAX_GAMMA) -> tuple[int, float] | None:
    """(γ, S(γ)): the γ in 1…``max_gamma`` that this reply's α and costs predict fastest (the
    theory chart's star and the ledger's "best γ"); None until :data:`MIN_JUDGED` drafts were
    judged and the costs were timed on :data:`MIN_TARGET_STEPS` steps and :data:`MIN_DRAFTING_ROUNDS`
    drafting rounds."""
    if not supports_prediction(metrics):
        return None
    curve = metrics.predicted_speedup_curve(max_gamma)
    if curve is None:
        return None
    best = max(range(len(curve)), key=lambda i: (curve[i], -i))
    return best + 1, curve[best]


def supports_prediction(metrics) -> bool:
    """Whether the reply's sample carries a prediction: judged drafts, drafting rounds, and t₁ known
    as well as a measured speedup needs it (a prediction is in units of t₁ too)."""
    drafting = sum(1 for r in metrics.rounds if r.num_drafted)
    return (metrics.num_verified >= MIN_JUDGED and drafting >= MIN_DRAFTING_ROUNDS
            and measured_speedup(metrics).shown)


def textbook_best(alpha: float, cost_ratio: float, max_gamma: int = SHOWN_MAX_GAMMA) -> tuple[int, float]:
    """(γ, S(γ)) maximising Leviathan's S(γ) = E[N]/(γc + 1) over 1…``max_gamma``."""
    best = theory.optimal_num_speculative_tokens(alpha, cost_ratio, max_gamma)
    return best, theory.predicted_speedup(alpha, best, cost_ratio)


def predicted_speedup(metrics) -> float | None:
    """The reply's predicted speedup (:attr:`SpeculationMetrics.predicted_speedup`) when its sample
    carries one (:func:`supports_prediction`), else None."""
    return metrics.predicted_speedup if supports_prediction(metrics) else None


def speedup_phrase(metrics) -> str:
    """The reply's speedup in words, the same on the page and in the terminal: ``1.21× ±0.05
    against 12 target steps timed in this reply (95 % interval), predicted 1.18×`` or ``speedup
    held back (timing: 2 target steps of the 3 needed)``."""
    measured = measured_speedup(metrics)
    predicted = predicted_speedup(metrics)
    return measured.text() + (f", predicted {predicted:.2f}×" if predicted is not None else "")


def contradictions(text: str, metrics) -> list[str]:
    """The claims in ``text`` (a sentence this module, the page or the CLI printed about the reply of
    ``metrics``) that its own figures contradict; [] when none. Checked: no α threshold of 1 or
    more; "no acceptance rate can pay" never next to a measured speedup above 1; a speedup shown
    only with its sample, and equal to the measured one; "timing: N target steps" and "α x" equal
    to the reply's; a best γ equal to :func:`best_gamma`'s. Used by the tests' sweep and by
    ``specchat bench`` on every reply it runs."""
    import re

    found = []
    for threshold in re.findall(r"α ≥ (\d+\.\d+)", text):
        if float(threshold) >= 1.0:
            found.append(f"a threshold of {threshold} written as a condition on α")
    measured = measured_speedup(metrics)
    if "no acceptance rate can pay" in text and measured.above_one():
        found.append(f"'no acceptance rate can pay' next to a measured {measured.short()}")
    for value, half in re.findall(r"(\d+\.\d\d)× ±(\d+\.\d\d) against", text):
        if not measured.shown or measured.value is None or measured.half_width is None:  # shown: neither is None
            found.append(f"a speedup of {value}× shown from {measured.num_steps} target step(s)")
        elif abs(float(value) - measured.value) > 0.006 or abs(float(half) - measured.value * measured.half_width) > 0.006:
            found.append(f"a speedup of {value}× ±{half} where the reply measured {measured.short()}")
    for steps in re.findall(r"timing: (\d+) target steps?", text):
        if int(steps) != measured.num_steps:
            found.append(f"'{steps} target steps' where the reply timed {measured.num_steps}")
    alpha = metrics.acceptance_rate
    for shown in re.findall(r"(?:^|[\s(])α[ =]+(\d\.\d\d)\b", text):
        if alpha is None or abs(float(shown) - alpha) > 0.006:
            found.append(f"α {shown} where the reply's α is {alpha}")
    best = best_gamma(metrics)
    for gamma in re.findall(r"the best is γ = (\d+)", text):
        if best is None or int(gamma) != best[0]:
            found.append(f"best γ = {gamma} where the reply's figures give {best}")
    return found
