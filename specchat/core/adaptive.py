"""Adaptive γ: pick ``num_speculative_tokens`` each round to maximise the predicted speedup.

ALGORITHM.md: the best γ is the integer that maximises S(γ); no derivative is needed, so we
evaluate every γ in 1…γ_max. Leviathan et al. 2023 (Section 3) assume one acceptance rate α
for every draft position and a verification pass that costs one target step whatever γ is.
Both are measured here instead of assumed:

- the per-position acceptance β_i = P(draft i accepted | drafts 1…i−1 accepted), so
  E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i (with one β for every position this is Leviathan's
  Equation 1, (1 − α^(γ+1)) / (1 − α));
- the round's cost in target steps T(γ)/t₁ = γ·c + ρ(γ + 1), each drafting round measured against
  the target-only steps timed next to it, medians of the latest rounds
  (:class:`specchat.core.round_costs.RelativeCosts`): a busy moment slows every pass alike and
  leaves these ratios alone, and one slow round moves no median.

γ* = argmax_γ S(γ) = E[N](γ) / (γ·c + ρ(γ + 1)): the expression the app's theory chart draws
(ALGORITHM.md, "Measured and predicted speedup, like for like"); with one β and ρ = 1 it is
Leviathan's Theorem 3.8, E[N] / (γc + 1).

**What the controller believes, and why** (docs/USING.md, "Adaptive γ"):

* *Acceptance follows its cause.* A drafter that has several sources (a lookup after a long or a
  short match, or a model: ``round_source``) gets one controller per source, since their α
  differ by far more than any one source's α drifts; they share the round costs.
* *Each reply is judged on its own.* Earlier replies' acceptance is a prior worth at most
  :data:`HISTORY_WEIGHT` judged drafts at a reply's start (an open-chat answer says little about
  the code edit after it), and the round costs keep only their latest few samples.
* *A pause ends on convincing evidence.* While paused, the decision to draft again uses each
  β one standard deviation below its estimate: a short streak of luck in text that seldom repeats
  does not restart drafting, a copy (every token right for a while) does within a few tokens.
* *Free evidence is used.* A drafter whose proposal costs nothing (a lookup: ``free_draft``) is
  judged in every round that drafts nothing: the target's own tokens are compared with what the
  lookup would have proposed, position by position as they are committed, which is exactly the
  draft's acceptance (P(token = x) = p(x) = min(1, p(x)/q(x)) for a one-hot q). A paused lookup
  resumes as soon as that evidence says it pays, and never needs a probe. A new lookup source
  starts paused (once the costs are known): the prior is no evidence, and its first rounds are
  judged for free before it drafts.

**Drafting pauses when it cannot pay** (γ = 0 with probes): once the costs are known, if every γ
in 1…γ_max is predicted to lose (max S(γ) < 1), the controller answers 0, a target-only step, and
drafts a *probe* only once every :meth:`AdaptiveGamma.probe_interval` rounds: the least P for
which one probe round in P costs at most :data:`PROBE_BUDGET` of target-only throughput. A source
whose drafts are free (a lookup) never probes: every paused round judges its draft anyway. A probe
drafts the γ that loses least (:meth:`AdaptiveGamma.probe_gamma`), and its cost includes a model
drafter's catch-up on the paused rounds' tokens (priced from its prompt-reading rate until a probe
has timed one: :meth:`AdaptiveGamma.catch_up_cost`). A pause that starts after the reply's own
drafting rounds owes no probe: those rounds were the evidence; the first probe comes P rounds on.
It only chooses how many tokens to draft; which tokens are committed is decided by verification
alone, so the output distribution is unchanged (lossless for any γ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specchat.core.draft import Drafter
from specchat.core.events import RoundEvent
from specchat.core.round_costs import WARMUP_ROUNDS, RelativeCosts  # noqa: F401 (WARMUP_ROUNDS: re-exported)

# Prior for a fresh controller: β = PRIOR_ACCEPTANCE with weight PRIOR_WEIGHT pseudo-rounds.
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 2.0
# Per-observation decay of the acceptance sums: a round 20 rounds ago weighs 0.9^20 ≈ 0.12.
DECAY = 0.9
# At a reply's start, earlier replies' acceptance counts as at most this many judged drafts at
# the first position (all positions scaled alike).
HISTORY_WEIGHT = 3.0
# While drafting is paused, the probes may cost at most this share of target-only throughput.
PROBE_BUDGET = 0.02
CONFIRM = 1 << 29  # _since_probe after a probe that alone said drafting pays: the next choice probes again


@dataclass
class AdaptiveGamma:
    """Choose γ per round from running estimates of per-position acceptance and round costs.

    Args:
        max_num_speculative_tokens: γ_max, the largest γ ever chosen (>= 1).
        initial_num_speculative_tokens: γ used until the costs are known (clipped to γ_max). 1 by
            default: the cheapest round that still measures α and the drafting costs, so a drafter
            that loses (on a CPU a verify pass over 5 positions can cost 4 target steps) costs
            little before the controller knows.
        costs: the round costs (shared by the controllers of one drafter's sources).
        source: the drafting source this controller judges (its drafter cost is the source's).
        free: the source's drafts cost nothing to make (a lookup): while paused it never probes,
            since every round that drafts nothing judges its draft for free (:meth:`observe`).

    Feed each :class:`RoundEvent` to :meth:`update` (and a free draft's outcome to
    :meth:`observe`); :meth:`choose` returns the next γ, 0 while drafting is paused (:attr:`paused`).

    Raises:
        ValueError: γ_max < 1.
    """

    max_num_speculative_tokens: int
    initial_num_speculative_tokens: int = 1
    costs: RelativeCosts = field(default_factory=RelativeCosts)
    source: str = ""
    free: bool = False  # its drafts cost nothing (a lookup): judged every round that drafts nothing, never probed
    paused: bool = False  # the last choice found every γ >= 1 predicted to lose
    best_predicted_speedup: float | None = None  # the last choice's best prediction over γ = 1…γ_max
    probe_catch_up: float | None = None  # the last probe's drafting beyond γ·c (a model drafter catching up), target steps; None before one
    catch_up_prior_ms: float | None = None  # before any probe was timed: what a catch-up is expected to cost, ms
    _accepted: list[float] = field(default_factory=list)  # exponentially weighted, per position
    _reached: list[float] = field(default_factory=list)
    _since_probe: int = 0  # paused rounds since the last probe
    _probing: bool = False  # the last choice was a probe
    _num_replies: int = 0
    _reply_probe: bool = False  # the last choice was a reply's first probe (no catch-up owed)
    _asked_target_step: bool = False  # this reply already chose one target-only round to time t₁
    _skip: int = 0  # paused choices left that answer 0 without re-deciding (until the next probe is due)
    _drafted_in_reply: bool = False  # a round of this reply drafted (its evidence is fresh: no probe owed)

    def __post_init__(self) -> None:
        if self.max_num_speculative_tokens < 1:
            raise ValueError(f"max_num_speculative_tokens must be >= 1, got {self.max_num_speculative_tokens}")
        self._accepted = [0.0] * self.max_num_speculative_tokens
        self._reached = [0.0] * self.max_num_speculative_tokens

    # -- estimates --------------------------------------------------------------------------
    @property
    def pooled_acceptance(self) -> float:
        """α over all positions, shrunk toward the prior (in (0, 1))."""
        return (sum(self._accepted) + PRIOR_ACCEPTANCE * PRIOR_WEIGHT) / (sum(self._reached) + PRIOR_WEIGHT)

    def acceptance_by_position(self, *, cautious: bool = False) -> list[float]:
        """β_1…β_γmax: each position's weighted acceptance, shrunk toward the pooled α. With
        ``cautious``, one standard deviation lower (the Beta posterior's, with n + PRIOR_WEIGHT
        pseudo-observations, floored at 0): what a paused controller needs to see before it drafts
        again, so that a short lucky streak in text that seldom repeats does not restart drafting."""
        pooled = self.pooled_acceptance
        betas = []
        for a, n in zip(self._accepted, self._reached):
            beta = (a + pooled * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
            if cautious:
                beta = max(0.0, beta - math.sqrt(beta * (1 - beta) / (n + PRIOR_WEIGHT + 1)))
            betas.append(beta)
        return betas

    @property
    def judged(self) -> float:
        """The weight of the acceptance evidence at the first position (decayed judged drafts)."""
        return self._reached[0]

    def draft_cost(self) -> float | None:
        """c of this controller's source, in target steps; None before it was timed, but 0 for a
        free source (a lookup: its drafts cost nothing to make) until then."""
        c = self.costs.draft_cost(self.source)
        return 0.0 if c is None and self.free else c

    def _curves(self, cautious: bool = False) -> tuple[list[float], list[float] | None]:
        """One read of the estimates for every γ = 1…γ_max: E[N](γ) (``cautious``: from
        :meth:`acceptance_by_position`'s cautious β), and T(γ)/t₁ = γ·c + ρ(γ + 1) (None while the
        costs are unknown)."""
        expected, total, reach = [], 1.0, 1.0
        for beta in self.acceptance_by_position(cautious=cautious):
            reach *= beta
            total += reach
            expected.append(total)
        c, verify = self.draft_cost(), self.costs.verify_curve(len(expected) + 1)
        if c is None or verify is None:
            return expected, None
        return expected, [g * c + verify[g - 1] for g in range(1, len(expected) + 1)]  # verify[g − 1] = ρ(g + 1)

    def expected_tokens_per_round(self, num_speculative_tokens: int) -> float:
        """E[N](γ) = Σ_{k=0..γ} Π_{i=1..k} β_i, with the current β estimates."""
        return 1.0 if num_speculative_tokens == 0 else self._curves()[0][num_speculative_tokens - 1]

    def predicted_speedup(self, num_speculative_tokens: int) -> float | None:
        """E[N](γ) / (γ·c + ρ(γ + 1)): the speedup over target-only decoding; None until the costs
        were timed (a drafting round next to a target step)."""
        return self._speedup(num_speculative_tokens, self._curves())

    @staticmethod
    def _speedup(num_speculative_tokens: int, curves) -> float | None:
        expected, rounds = curves
        if rounds is None or rounds[num_speculative_tokens - 1] <= 0:
            return None
        return expected[num_speculative_tokens - 1] / rounds[num_speculative_tokens - 1]

    def catch_up_cost(self) -> float:
        """A scheduled probe's drafting beyond γ·c, target steps: the last probe's measured
        :attr:`probe_catch_up`; before any was timed, :attr:`catch_up_prior_ms` (the drafter's own
        prompt-reading rate times the tokens a catch-up reads, :class:`GammaPolicy`) over t₁ now,
        else 0. Without the prior a model drafter's first probe in a reply came after ~20 rounds
        and cost ~2 target steps more than its interval assumed (llama.cpp, 2 cores: a 16-token
        catch-up of the 0.5B sibling ≈ 200 ms, 2.3 steps of the 1.5B target)."""
        if self.probe_catch_up is not None:
            return self.probe_catch_up
        t1 = self.costs.target_step_ms
        return self.catch_up_prior_ms / t1 if self.catch_up_prior_ms and t1 else 0.0

    def probe_interval(self, num_speculative_tokens: int, curves=None) -> int:
        """P: while paused, one probe round of γ every P rounds. A probe costs T(γ)/t₁ target steps
        (plus :meth:`catch_up_cost`) and commits E[N](γ) tokens that target-only steps would
        commit in E[N](γ) steps, so over P rounds throughput drops by (T/t₁ + catch-up − E[N]) /
        (P − 1 + E[N]); P is the least integer >= 2 that keeps this at most :data:`PROBE_BUDGET`
        (1 when a probe loses nothing). Needs the costs known."""
        expected, rounds = curves or self._curves()
        assert rounds is not None, "needs the costs known"
        loss = rounds[num_speculative_tokens - 1] + self.catch_up_cost() - expected[num_speculative_tokens - 1]
        if loss <= 0:
            return 1
        return max(2, math.ceil(loss / PROBE_BUDGET + 1.0 - expected[num_speculative_tokens - 1] - 1e-9))

    def probe_gamma(self, curves=None) -> int:
        """The γ a probe drafts: the least loss T(γ)/t₁ − E[N](γ) against target-only steps over
        1…γ_max (ties: the smaller γ). Needs the costs known."""
        expected, rounds = curves or self._curves()
        assert rounds is not None, "needs the costs known"
        losses = [rounds[g] - expected[g] for g in range(self.max_num_speculative_tokens)]
        return 1 + min(range(len(losses)), key=lambda i: round(losses[i], 9))

    def break_even_acceptance(self, num_speculative_tokens: int = 1) -> float | None:
        """The α (one acceptance rate at every position) at which γ breaks even at the measured
        costs: Σ_{k=0..γ} α^k = T(γ)/t₁ (Leviathan et al. 2023, Equation 1, against the measured
        round cost); 1.0 when no α < 1 pays, 0.0 when any α pays, None before the costs are known."""
        from specchat.core.costs import BreakEven

        c, rho = self.draft_cost(), self.costs.verify_cost(num_speculative_tokens + 1)
        if c is None or rho is None:
            return None
        even = BreakEven(num_speculative_tokens, c, rho)
        return 1.0 if even.never_pays else 0.0 if even.pays_always else even.acceptance

    # -- the policy -------------------------------------------------------------------------
    def new_reply(self) -> None:
        """A reply starts: the earlier replies' acceptance becomes a prior of at most
        :data:`HISTORY_WEIGHT` judged drafts, and while paused the first choice is a probe (the
        drafter has just read the prompt, so no catch-up is owed; a new prompt may be predictable)."""
        if self._reached[0] > HISTORY_WEIGHT:
            scale = HISTORY_WEIGHT / self._reached[0]
            self._accepted = [a * scale for a in self._accepted]
            self._reached = [n * scale for n in self._reached]
        self._since_probe, self._skip = 1 << 30, 0
        self._drafted_in_reply = False
        self._num_replies += 1
        self._asked_target_step = False

    def choose(self) -> int:
        """γ for the next round: argmax of :meth:`predicted_speedup` over 1…γ_max (ties: smaller);
        0 (a target-only step) when even the best γ is predicted to lose, but for a probe of
        :meth:`probe_gamma` every :meth:`probe_interval` rounds. Before the costs are known: the
        initial γ, or once per reply 0 when a drafting round was timed but no target step was
        (no timing rounds), to time t₁. While paused it re-decides only when the next probe is
        due, at a reply's start, or after new free evidence (:meth:`observe`)."""
        self._probing = self._reply_probe = False
        if self.paused and self._skip > 0:
            self._skip -= 1
            self._since_probe += 1
            return 0
        curves = self._curves()
        if curves[1] is None:
            timed_drafting = self.costs.num_samples(self.source)[1] > 0
            if timed_drafting and not self.costs.num_target_steps and self._num_replies and not self._asked_target_step:
                self._asked_target_step = True  # no target step timed (no timing rounds): time t₁ once
                return 0
            return max(1, min(self.initial_num_speculative_tokens, self.max_num_speculative_tokens))
        best, best_s = self._best(curves)
        self.best_predicted_speedup = best_s
        if self.paused:  # a pause ends on convincing evidence only (the cautious β)
            resume, resume_s = self._best(self._curves(cautious=True))
            if resume_s >= 1.0:
                self.paused, self._since_probe = False, 0
                return resume
        elif best_s >= 1.0:
            self._since_probe = 0
            return best
        if not self.paused and self._drafted_in_reply:  # pausing after drafting: its rounds were the probe
            self._since_probe = 0
        self.paused = True
        if self.free:  # judged for free in every paused round (observe): no probe needed
            return 0
        self._since_probe += 1
        probe = self.probe_gamma(curves)
        interval = self.probe_interval(probe, curves)
        if self._since_probe >= interval:
            self._reply_probe = self._since_probe >= 1 << 30
            self._since_probe, self._probing = 0, True
            return probe
        self._skip = interval - self._since_probe - 1
        return 0

    def _best(self, curves) -> tuple[int, float]:
        """(γ, S(γ)) of the best γ in 1…γ_max (ties: the smaller)."""
        best, best_s = 1, float("-inf")
        for gamma in range(1, self.max_num_speculative_tokens + 1):
            s = self._speedup(gamma, curves)
            if s is not None and s > best_s + 1e-12:
                best, best_s = gamma, s
        return best, best_s

    def update(self, event: RoundEvent) -> None:
        """Fold one round in: its timings (into the shared costs) and its judged positions. A round
        that drafted nothing carries no news about acceptance. A probe's drafting time, which
        includes catching up on the paused rounds' tokens, is not a drafting cost sample; what it
        spent beyond γ·c is kept as :attr:`probe_catch_up`."""
        catching_up = self._probing and not self._reply_probe
        self.costs.add(event, source=self.source, draft=not catching_up)
        c, t1 = self.draft_cost(), self.costs.target_step_ms
        if catching_up and event.num_drafted and c is not None and t1:
            self.probe_catch_up = max(0.0, event.draft_ms / t1 - event.num_drafted * c)
        if event.num_drafted:
            self._drafted_in_reply = True
            self._judge([bool(a) for a in event.accepted_mask[: self.max_num_speculative_tokens]])
        if self._probing and event.num_drafted and c is not None and t1:
            # a probe that alone says drafting pays is not trusted alone, nor ignored: probe again
            # at once, and two of the reply's own rounds then replace the earlier replies' costs
            gamma = event.num_drafted
            own = gamma * c + (event.round_ms - event.draft_ms) / t1
            if own > 0 and self.expected_tokens_per_round(gamma) / own >= 1.0:
                self._skip, self._since_probe = 0, CONFIRM

    def observe(self, judged: list[tuple[int, bool]]) -> None:
        """Free drafts' tokens, judged without drafting (:class:`GammaPolicy`): ``(position,
        accepted)`` pairs, 0-based, each position reached (the earlier ones of its draft were
        right). The sums decay once for the lot. While paused, the next choice decides again."""
        for values in (self._accepted, self._reached):
            for i in range(len(values)):
                values[i] *= DECAY
        for position, accepted in judged:
            if position < len(self._reached):
                self._reached[position] += 1.0
                self._accepted[position] += 1.0 if accepted else 0.0
        if self.paused:
            self._skip = 0

    def _judge(self, mask: list[bool]) -> None:
        for values in (self._accepted, self._reached):
            for i in range(len(values)):
                values[i] *= DECAY
        for i, accepted in enumerate(mask):  # the accepted drafts and the first rejected one
            self._reached[i] += 1.0
            self._accepted[i] += 1.0 if accepted else 0.0


class GammaPolicy:
    """Adaptive γ for one generation, the engine's side: which controller judges each round (one
    per drafting source, ``drafter.round_source(ids)``, sharing one :class:`RelativeCosts` per
    drafter, γ_max and sampling mode), the γ it chooses, and the free evidence of a round that
    drafts nothing (``drafter.free_draft(ids)``: what a lookup would have proposed, judged against
    the token the target commits). The controllers and costs live in the engine's dicts, across
    generations.

    Args:
        controllers: (drafter name, γ_max, greedy, source) -> :class:`AdaptiveGamma`.
        costs: (drafter name, γ_max, greedy) -> :class:`RelativeCosts`.
        drafter: the generation's drafter.
        max_num_speculative_tokens: γ_max. greedy: the sampling mode (their α differ).
        catch_up_ms: what a paused model drafter's catch-up is expected to cost before a probe
            timed one (:attr:`AdaptiveGamma.catch_up_prior_ms`), ms; None when unknown.
    """

    def __init__(self, controllers: dict[tuple[str, int, bool, str], AdaptiveGamma], costs: dict[tuple[str, int, bool], RelativeCosts],
                 drafter: Drafter, max_num_speculative_tokens: int, greedy: bool,
                 catch_up_ms: float | None = None):
        self._key = (drafter.name, max_num_speculative_tokens, greedy)
        self._catch_up_ms = catch_up_ms
        self.costs = costs.setdefault(self._key, RelativeCosts())
        self.costs.new_reply()
        self._controllers = controllers
        self._drafter = drafter
        self._replied: set = set()
        self.controller: AdaptiveGamma | None = None
        self._pending: tuple[AdaptiveGamma, list[int]] | None = None  # this round's free draft, if it drafts nothing
        self._chains: list[list] = []  # [controller, free draft, next position]: judged token by token

    def choose(self, ids: list[int], timing: bool) -> tuple[int, bool, bool]:
        """(γ, drafting paused, the controller's own t₁ round) for the round after ``ids``; γ = 0
        when ``timing`` (the engine's timing round)."""
        source = self._drafter.round_source(ids)
        key = (*self._key, source)
        controller = self._controllers.get(key)
        if controller is None:
            free = bool(self._drafter.free_draft(ids))
            # a new lookup source starts paused: judged for free until its own evidence says it pays
            controller = self._controllers[key] = AdaptiveGamma(self._key[1], costs=self.costs, source=source, free=free,
                                                                paused=free)
        if key not in self._replied:  # its first round in this reply
            self._replied.add(key)
            controller.new_reply()
            controller.catch_up_prior_ms = self._catch_up_ms  # a free source never probes: unused there
        self.controller = controller
        gamma = 0 if timing else controller.choose()
        self._pending = None
        if gamma == 0 and controller.free:
            tokens = self._drafter.free_draft(ids)[: self._key[1]]
            self._pending = (controller, [int(t) for t in tokens]) if tokens else None
        paused = not timing and gamma == 0 and controller.paused
        return gamma, paused, not timing and gamma == 0 and not controller.paused

    @property
    def paused_speedup(self) -> float | None:
        """The speedup the current controller predicts for its best γ (``RoundEvent.paused_speedup``
        of a round it paused); None before :meth:`choose`."""
        return None if self.controller is None else self.controller.best_predicted_speedup

    def update(self, event: RoundEvent, committed: list[int]) -> None:
        """Fold in the round and the free drafts it judges (``committed``: the round's committed
        ids, in order). A round that drafted nothing starts judging its free draft: its first token
        against the token committed now, its second against the next committed token if the first
        was right, and so on (whatever the later rounds draft: the committed tokens are the
        target's either way), so every position's acceptance is measured while drafting pauses."""
        assert self.controller is not None, "choose() comes before update()"
        self.controller.update(event)
        if self._pending is not None and not event.num_drafted:
            self._chains.append([*self._pending, 0])
        judged: dict[int, tuple[AdaptiveGamma, list[tuple[int, bool]]]] = {}
        for token in committed:
            alive = []
            for chain in self._chains:
                controller, tokens, position = chain
                right = token == tokens[position]
                judged.setdefault(id(controller), (controller, []))[1].append((position, right))
                if right and position + 1 < len(tokens):
                    chain[2] += 1
                    alive.append(chain)
            self._chains = alive
        for controller, positions in judged.values():
            controller.observe(positions)
