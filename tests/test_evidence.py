"""specchat.core.evidence: every sentence about a reply, swept over a grid of acceptance rates,
costs and sample sizes, checked against the arithmetic (never against the module's own output).

The break-even is Leviathan et al. 2023, Equation 1, against the measured round cost: a round of
γ costs γ·c + v(γ + 1)/t₁ target steps and commits Σ_{k=0..γ} α^k tokens on average.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics

import pytest

from specchat.core import evidence
from specchat.core.costs import BreakEven
from specchat.core.events import RoundEvent
from specchat.core.metrics import SpeculationMetrics


def _pays(alpha: float, gamma: int, round_cost: float) -> bool:
    return sum(alpha**k for k in range(gamma + 1)) > round_cost


ALPHAS = [i / 200 for i in range(201)]


@pytest.mark.parametrize(("gamma", "draft_cost", "verify_cost"), list(itertools.product(
    [1, 2, 4], [0.0, 0.05, 0.2, 0.5, 1.0, 1.5], [0.8, 1.0, 1.15, 1.3, 1.7, 1.9996, 2.2, 3.5])))
def test_every_break_even_sentence_is_true_of_the_arithmetic(gamma, draft_cost, verify_cost):
    even = BreakEven(gamma, draft_cost, verify_cost)
    words = evidence.break_even_sentence(even)
    cost = gamma * draft_cost + verify_cost
    # the costs it rests on, as given
    assert f"c = {draft_cost:.2f} target steps" in words and f"over {gamma + 1} positions {verify_cost:.2f}" in words
    if "no acceptance rate can pay" in words:
        assert not any(_pays(a, gamma, cost) for a in ALPHAS) and cost >= gamma + 1
    elif "pays at any acceptance rate" in words:
        assert all(_pays(a, gamma, cost) or a == 0 for a in ALPHAS) and cost <= 1
    elif "pays only if every draft is accepted" in words:
        assert not _pays(1 - 1e-6, gamma, cost) and _pays(1.0, gamma, cost)
    else:
        threshold = float(re.search(r"α ≥ (\d\.\d+)\)?$", words).group(1))
        assert threshold < 1.0  # never "pays from α ≥ 1.00", a condition no α below 1 meets
        assert _pays(threshold + 1e-9, gamma, cost)  # rounded up: at the printed value it breaks even or pays
        below = threshold - 10.0 ** -len(str(threshold).split(".")[1])  # one printed digit lower
        assert not _pays(below - 1e-9, gamma, cost)  # and not true a step below it
        assert ("only if nearly every draft" in words) == (threshold >= 0.99)


def _metrics(steps_ms: list[float], drafting: list[tuple[int, int, float, float]]) -> SpeculationMetrics:
    """Target-only steps (ms each), then drafting rounds (drafted, accepted, draft ms, verify ms)."""
    m, i = SpeculationMetrics(), 0
    for ms in steps_ms:
        m.update(RoundEvent(i, 0, 0, 0, 1, (), 0.0, 0, ms, 0.0, ms))
        m.num_tokens += 1
        i += 1
    for drafted, accepted, d_ms, v_ms in drafting:
        mask = (True,) * accepted + ((False,) if accepted < drafted else ())
        m.update(RoundEvent(i, drafted, drafted, accepted, accepted + 1, mask, d_ms, drafted, v_ms, 0.0, d_ms + v_ms))
        m.num_tokens += accepted + 1
        i += 1
    return m


@pytest.mark.parametrize(("num_steps", "scatter"), list(itertools.product([0, 1, 2, 3, 4, 8, 30], [0.0, 0.03, 0.2])))
def test_a_measured_speedup_is_shown_only_with_its_sample_and_its_interval_is_students(num_steps, scatter):
    """Steps of 100 ms ± scatter (alternating), then 10 drafting rounds: the speedup N·t₁/D is
    shown only from 3 steps and a 95 % half width (t quantile × the standard error of the mean,
    relative) within 10 %; otherwise the words say how many steps were timed."""
    steps = [100.0 * (1 + scatter * (-1) ** i) for i in range(num_steps)]
    m = _metrics(steps, [(2, 2, 5.0, 150.0)] * 10)
    measured = evidence.measured_speedup(m)
    tokens, decode = num_steps + 30, sum(steps) + 10 * 155.0
    if num_steps:
        mean = statistics.fmean(steps)
        assert measured.value == pytest.approx(tokens * mean / decode)
    if num_steps >= 2:
        rel = statistics.stdev(steps) / math.sqrt(num_steps) / statistics.fmean(steps)
        assert measured.half_width == pytest.approx(evidence.t975(num_steps - 1) * rel)
    expected_shown = num_steps >= 3 and (scatter == 0 or evidence.t975(num_steps - 1) * statistics.stdev(steps)
                                         / math.sqrt(num_steps) / statistics.fmean(steps) <= 0.10)
    assert measured.shown == expected_shown
    phrase = evidence.speedup_phrase(m)
    if expected_shown:
        assert phrase.startswith(f"{measured.value:.2f}× ±")
    else:
        assert "held back" in phrase and not re.search(r"\d\.\d\d×", phrase)
        if 0 < num_steps < 3:
            assert f"timing: {num_steps} target step" in phrase
    assert evidence.contradictions(phrase, m) == []


def test_t975_is_students_table():
    assert evidence.t975(1) == 12.706 and evidence.t975(2) == 4.303 and evidence.t975(30) == 2.042
    assert evidence.t975(13) == 2.179  # between entries: the smaller df's (conservative)
    assert evidence.t975(500) == 1.96
    with pytest.raises(ValueError):
        evidence.t975(0)


@pytest.mark.parametrize(("alpha_accepted", "draft_ms", "verify_ms", "num_steps", "num_drafting"), list(itertools.product(
    [0, 1, 2], [0.0, 20.0, 60.0], [90.0, 130.0, 260.0], [1, 3, 6], [1, 3, 12])))
def test_the_pause_note_and_the_ledger_words_never_contradict_the_reply(alpha_accepted, draft_ms, verify_ms,
                                                                          num_steps, num_drafting):
    """A grid of replies (γ = 2 rounds accepting 0, 1 or 2 drafts; drafting and verify costs from
    cheap to hopeless; 1 to 6 target steps of 100 ms; 1 to 12 drafting rounds), some paused: every
    sentence printed about each one is consistent with its figures, and a break-even or best γ
    appears only with its sample."""
    from specchat.commands.generate import summary_line
    from specchat.core.events import DoneEvent, StopReason
    from specchat.ui.html.ledger import worth_words
    from specchat.ui.html.render import reply_summary

    m = _metrics([100.0] * num_steps, [(2, alpha_accepted, draft_ms, verify_ms)] * num_drafting)
    m.update(RoundEvent(99, 0, 0, 0, 1, (), 0.0, 0, 100.0, 0.0, 100.0, drafting_paused=True, paused_speedup=0.9))
    done = DoneEvent(StopReason.EOS, (), (), "", 1.0, m.decode_ms, 3)
    texts = [summary_line("x", m, done), reply_summary(m), m.pause_note(),
             worth_words("x", m.acceptance_rate, m.cost_ratio, m)]
    for text in texts:
        assert evidence.contradictions(text, m) == [], text
    assert "speedup speedup" not in texts[0] and texts[0].count("speedup") >= 1  # "speedup held back", said once
    note = m.pause_note()
    if num_steps + 1 < evidence.MIN_TARGET_STEPS or num_drafting < evidence.MIN_DRAFTING_ROUNDS:
        assert "too few timed rounds" in note and "pays" not in note.split("too few")[1].replace("drafting pays (", "")
    elif verify_ms / 100.0 >= evidence.MIN_VERIFY_STEPS:
        cost = 2 * draft_ms / 2 / 100.0 + verify_ms / 100.0  # the drafted γ = 2: 2c + v(3)/t₁
        assert ("no acceptance rate can pay" in note) == (cost >= 3)
        assert "γ = 2" in note
    worth = texts[3]
    if m.num_verified < evidence.MIN_JUDGED:
        assert "best" not in worth.replace("too few for a best γ", "")


def test_contradictions_are_found():
    """The checker itself: each kind of false claim the issue saw is caught."""
    m = _metrics([100.0, 100.0, 100.0], [(1, 1, 0.0, 50.0)] * 6)  # 1.0 + 2 tokens per 50 ms: ≈ 3×
    assert evidence.measured_speedup(m).shown and evidence.measured_speedup(m).value > 1
    assert evidence.contradictions("so drafting γ = 1 pays from α ≥ 1.00", m)
    assert evidence.contradictions("… commits at most 2 tokens, so no acceptance rate can pay", m)
    assert evidence.contradictions("1.21× ±0.02 against 3 target steps timed in this reply", m)
    assert evidence.contradictions("speedup held back (timing: 2 target steps of the 3 needed)", m)
    assert evidence.contradictions("α 0.58 · 3 tokens", m)  # the reply's α is 1.00
    assert evidence.contradictions("With the costs measured in this reply the best is γ = 16", m)
    thin = _metrics([80.0, 80.0], [(1, 1, 0.0, 50.0)])
    assert evidence.contradictions("1.21× ±0.02 against 2 target steps timed in this reply", thin)


def test_a_speedup_held_back_for_its_scatter_says_by_how_much_over_the_limit():
    """An interval a hair over ±10 % reads "±10.1 %", never "±10 %" (held back at the limit it names)."""
    held = evidence.MeasuredSpeedup(1.2, 125, 0.1004)
    assert not held.shown and held.text() == (
        "speedup held back (timing: 125 target steps too scattered, 95 % interval ±10.1 %, over the ±10 % a speedup "
        "is shown within (a busy machine?))")
    assert evidence.MeasuredSpeedup(1.2, 125, 0.1).shown
