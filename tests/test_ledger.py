"""The seed's cost analysis (issue 13): the formulas against hand-computed values, the ledger
counted from rounds built by hand, ĉ from parameter counts worked out from a model's config, and
the proof view's sum equal to p (by hand, and on every rejection of real traced generations)."""

from __future__ import annotations

import re

import pytest
import torch
from lossless import TINY_PROMPT, TINY_VOCAB

from specchat.analysis.ledger import ModelSize, ModelSizes, count_ledger
from specchat.core import theory
from specchat.core.config import GenerationConfig
from specchat.core.events import RoundEvent
from specchat.core.metrics import SpeculationMetrics
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime, model_size
from specchat.ui.html.ledger import drafter_points, headline, ledger_html, worth_words


# ---- the formulas: the seed's worked example -------------------------------------------------------
def test_seed_worked_example():
    """α = 0.8, c = ĉ = 0.1, γ = 4 (ALGORITHM.md): by hand, 0.8^5 = 0.32768, so
    E[N] = 0.67232 / 0.2 = 3.3616; S = 3.3616 / (4·0.1 + 1) = 2.4011;
    arithmetic = 0.2 · (0.4 + 4 + 1) / 0.67232 = 1.08 / 0.67232 = 1.6064."""
    assert theory.expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    assert theory.predicted_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4, abs=1e-12)
    assert theory.flop_multiplier(0.8, 4, 0.1) == pytest.approx(1.08 / 0.67232, abs=1e-12)
    assert round(theory.expected_tokens_per_round(0.8, 4), 2) == 3.36
    assert round(theory.predicted_speedup(0.8, 4, 0.1), 2) == 2.40
    assert round(theory.flop_multiplier(0.8, 4, 0.1), 2) == 1.61


def test_alpha_greater_than_c_rule():
    """S(γ) > 1 for some γ iff α > c: S(1) = (1 + α)/(1 + c) > 1 exactly when α > c, and S(γ)
    falls below S(1) for every γ when α <= c."""
    for alpha, c in ((0.3, 0.29), (0.5, 0.1), (0.9, 0.85)):
        assert max(theory.predicted_speedup(alpha, g, c) for g in range(1, 20)) > 1
    for alpha, c in ((0.3, 0.3), (0.5, 0.6), (0.1, 0.9)):
        assert max(theory.predicted_speedup(alpha, g, c) for g in range(1, 20)) <= 1 + 1e-12


# ---- the ledger, counted from hand-built rounds ---------------------------------------------------
def _rounds():
    # fields: index, γ, drafted, accepted, committed, mask, draft_ms, draft_steps, verify_ms, elapsed, round_ms, timing
    return [
        RoundEvent(0, 4, 4, 4, 5, (True,) * 4, 40.0, 4, 100.0, 140.0, 140.0),  # all accepted + bonus
        RoundEvent(1, 4, 4, 1, 2, (True, False), 40.0, 4, 100.0, 280.0, 140.0),  # 1 kept, 1 rejected, 2 unjudged
        RoundEvent(2, 4, 0, 0, 1, (), 0.0, 0, 80.0, 360.0, 80.0, timing=True),  # a timing round
    ]


SIZES = ModelSizes(target=ModelSize(400, 1000), drafter=ModelSize(100, 300))  # ĉ = 0.25


def test_counted_ledger_by_hand():
    ledger = count_ledger(_rounds(), sizes=SIZES, alpha=0.8, prefill_ms=500.0)
    assert (ledger.num_tokens, ledger.target_passes, ledger.target_only_passes) == (8, 3, 8)
    assert ledger.target_positions == 5 + 5 + 1
    assert (ledger.num_drafted, ledger.num_accepted, ledger.num_thrown_away, ledger.drafter_passes) == (8, 5, 3, 8)
    assert ledger.flop_ratio == 0.25
    assert ledger.reads_factor == pytest.approx(8 / 3)
    # bytes: target 3 passes × 1000, target-only 8 × 1000, drafter 8 passes × 300
    assert (ledger.target_bytes, ledger.target_only_bytes, ledger.drafter_bytes) == (3000, 8000, 2400)
    assert ledger.bytes_factor == pytest.approx(5400 / 8000)
    # arithmetic: 11 target positions + 0.25 × 8 drafted = 13 units for 8 tokens
    assert ledger.arithmetic_units == pytest.approx(13.0)
    assert ledger.arithmetic == pytest.approx(13 / 8)
    assert ledger.draft_share == pytest.approx(80 / 360)
    assert ledger.prefill_share == pytest.approx(500 / 860) and ledger.mostly_prefill
    # predictions at α = 0.8, per round as run: two rounds of γ = 4 (E[N] = 3.3616 tokens for
    # 4·0.25 + 4 + 1 = 6 units each) and one target-only round (1 token, 1 unit)
    assert ledger.reads_factor_predicted == pytest.approx((2 * 3.3616 + 1) / 3)
    assert ledger.arithmetic_predicted == pytest.approx((2 * 6 + 1) / (2 * 3.3616 + 1))


def test_hybrid_lookup_rounds_draft_without_drafter_arithmetic():
    """A hybrid reply: a lookup round drafts 6 tokens with no drafter pass, a model round 4 with
    4 passes; only the passes cost drafter arithmetic and bytes."""
    rounds = [
        RoundEvent(0, 6, 6, 6, 7, (True,) * 6, 0.5, 0, 120.0, 120.5, 120.5),  # lookup: all kept + bonus
        RoundEvent(1, 4, 4, 2, 3, (True, True, False), 40.0, 4, 100.0, 260.5, 140.0),  # model round
    ]
    ledger = count_ledger(rounds, sizes=SIZES, alpha=0.8)
    assert (ledger.num_tokens, ledger.num_drafted, ledger.drafter_passes) == (10, 10, 4)
    assert ledger.target_positions == 7 + 5
    assert ledger.arithmetic_units == pytest.approx(12 + 0.25 * 4)  # not 0.25 × 10 drafted
    assert ledger.drafter_bytes == 4 * 300


def test_fixed_gamma_prediction_is_the_seed_formula():
    """With every round at γ = 4 and no target-only round, the predicted multiplier is
    (1 − α)(γĉ + γ + 1)/(1 − α^(γ+1)) and the predicted read factor E[N]."""
    rounds = [RoundEvent(i, 4, 4, 1, 2, (True, False), 40.0, 4, 100.0, 0.0, 140.0) for i in range(5)]
    sizes = ModelSizes(ModelSize(1000, 1), ModelSize(100, 1))  # ĉ = 0.1
    ledger = count_ledger(rounds, sizes=sizes, alpha=0.8)
    assert ledger.arithmetic_predicted == pytest.approx(1.08 / 0.67232)
    assert ledger.reads_factor_predicted == pytest.approx(3.3616)
    # counted: 5 rounds × (5 positions + 0.1 × 4) = 27 units for 10 tokens
    assert ledger.arithmetic == pytest.approx(2.7)


def test_ledger_without_sizes_or_alpha():
    ledger = count_ledger(_rounds())
    assert ledger.arithmetic is None and ledger.target_bytes is None and ledger.bytes_factor is None
    assert ledger.reads_factor_predicted is None and ledger.arithmetic_predicted is None
    assert ledger.reads_factor == pytest.approx(8 / 3)
    empty = count_ledger([])
    assert empty.reads_factor is None and empty.draft_share is None


def test_target_only_ledger_is_one_for_one():
    rounds = [RoundEvent(i, 0, 0, 0, 1, (), 0.0, 0, 50.0, 0.0, 50.0) for i in range(6)]
    ledger = count_ledger(rounds, sizes=ModelSizes(ModelSize(10, 20)), alpha=None, prefill_ms=10.0)
    assert ledger.reads_factor == 1.0 and ledger.arithmetic == 1.0 and ledger.flop_ratio == 0.0
    assert ledger.bytes_factor == 1.0 and not ledger.mostly_prefill
    assert "6 target passes for 6 tokens (as many weight reads as target-only," in ledger.line()
    assert "(2.67× fewer weight reads, E[N] predicts n/a)" in count_ledger(_rounds()).line()  # 8 tokens, 3 passes


def test_model_sizes_json_round_trip_and_bad_values():
    assert ModelSizes.from_json(SIZES.to_json()) == SIZES
    assert ModelSizes.from_json({"target": {"matmul_params": 5, "weight_bytes": 10}, "drafter": None}).flop_ratio == 0.0
    for bad in (None, {}, {"target": {"matmul_params": "x"}}, [1, 2]):
        assert ModelSizes.from_json(bad) is None
    with pytest.raises(ValueError, match="no matmul weights"):
        ModelSizes(ModelSize(0, 0))


# ---- ĉ from parameter counts ---------------------------------------------------------------------
def test_model_size_counts_linear_weights_once():
    """Linear(4, 3) with bias: 12 + 3; Linear(3, 5) without: 15; a second module sharing that
    weight (a tied head) adds nothing; an embedding is a lookup, not a matmul."""
    first, second = torch.nn.Linear(4, 3), torch.nn.Linear(3, 5, bias=False)
    tied = torch.nn.Linear(3, 5, bias=False)
    tied.weight = second.weight
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), first, second, tied)
    assert model_size(model) == ModelSize(30, 120)  # float32: 4 bytes each
    assert model_size(model.to(torch.bfloat16)) == ModelSize(30, 60)


def test_model_size_of_a_llama_from_its_config():
    """Per layer: q, o h×h; k, v h×(kv heads × head dim); gate, up h×i; down i×h; plus the
    LM head V×h (the untied embedding is not a matmul)."""
    from tiny_models import tiny_model

    model = tiny_model(vocab_size=TINY_VOCAB, seed=0)
    c = model.config
    h, i, kv = c.hidden_size, c.intermediate_size, c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i
    expected = c.num_hidden_layers * per_layer + TINY_VOCAB * h
    assert model_size(model) == ModelSize(expected, 4 * expected)


def test_model_size_of_an_int4_copy(tmp_path):
    """The int4 copy does the same multiply-adds (ĉ = 1) on about a quarter of the bytes."""
    pytest.importorskip("bitsandbytes")
    from tiny_models import tiny_model

    from specchat.runtimes import loading

    full = tiny_model(vocab_size=96, seed=0, hidden_size=64)
    loading._save_model_files(full, tmp_path)
    quantized = loading.load_model(tmp_path, dtype=torch.float32, int4=True)
    a, b = model_size(full), model_size(quantized)
    assert b.matmul_params == a.matmul_params
    assert ModelSizes(a, b).flop_ratio == 1.0
    # NF4: two weights per byte, plus one float32 scale (absmax) per block of 64 weights; every
    # linear layer here (the LM head too) is quantized
    n = a.matmul_params
    assert a.weight_bytes == 4 * n
    assert b.weight_bytes == n // 2 + 4 * (n // 64)


# ---- the proof view: min(p, q) + (1 − β)·p′ = p ----------------------------------------------------
def test_proof_by_hand():
    """p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2): β = 0.2 + 0.3 + 0.2 = 0.7, the residual
    max(0, p − q) = (0.3, 0, 0) normalised is (1, 0, 0), so the residual path is (0.3, 0, 0) and
    min(p, q) + it = (0.5, 0.3, 0.2) = p."""
    from specchat.core.roundtrace import proof_trace
    from specchat.core.sampling import residual_probs
    from specchat.ui.html.inspector import proof_rows

    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.6, 0.2])
    proof = proof_trace(p, q, 1, residual_probs(p, q, 1))
    assert proof.beta == pytest.approx(0.7)
    rows = {r.token_id: r for r in proof_rows(proof)}
    assert [rows[t].accepted_path for t in range(3)] == pytest.approx([0.2, 0.3, 0.2])
    assert [rows[t].residual_path for t in range(3)] == pytest.approx([0.3, 0.0, 0.0])
    assert [rows[t].total for t in range(3)] == pytest.approx([0.5, 0.3, 0.2])
    assert None not in rows  # every token listed: no "other" row


def test_proof_by_hand_one_hot_draft():
    """A greedy or n-gram draft: q one-hot at the draft x = 1, so β = p(1) = 0.3 and the residual
    is p without token 1, renormalised: (0.5, 0, 0.2)/0.7; (1 − β)·p′ = (0.5, 0, 0.2)."""
    from specchat.core.roundtrace import proof_trace
    from specchat.core.sampling import residual_probs
    from specchat.ui.html.inspector import proof_rows

    p = torch.tensor([0.5, 0.3, 0.2])
    proof = proof_trace(p, None, 1, residual_probs(p, None, 1))
    assert proof.beta == pytest.approx(0.3)
    rows = {r.token_id: r for r in proof_rows(proof)}
    assert rows[1].q == 1.0 and rows[0].q == 0.0
    assert [rows[t].residual_path for t in range(3)] == pytest.approx([0.5, 0.0, 0.2])
    assert [rows[t].total for t in range(3)] == pytest.approx([0.5, 0.3, 0.2])


@pytest.fixture(scope="module")
def sampled_traces(engine, other):
    out = []
    for drafter, temperature, top_p in (("model", 0.8, 1.0), ("model", 1.0, 0.8), ("ngram", 0.8, 1.0)):
        d = NgramDrafter() if drafter == "ngram" else ModelDrafter(
            TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="o")
        config = GenerationConfig(num_speculative_tokens=4, temperature=temperature, top_p=top_p, max_new_tokens=40,
                                  seed=5, trace=True)
        out.append(list(engine.generate(TINY_PROMPT, d, config)))
    return out


def test_proof_sum_equals_p_on_real_rejections(sampled_traces):
    """At every rejection of three sampled generations: for each listed token and for the rest
    summed, min(p, q) + (1 − β)·p′ equals p to float32 precision; p matches the p list as used;
    β is the acceptance probability Σ min(p, q), which the rest's share completes; the proof
    is recorded at the rejection and nowhere else."""
    from specchat.ui.html.inspector import proof_rows

    seen = 0
    for events in sampled_traces:
        for r in (e for e in events if isinstance(e, RoundEvent)):
            for i, pos in enumerate(r.trace.positions):
                if pos.proof is None:
                    continue
                assert i == r.trace.rejected_index
                seen += 1
                proof = pos.proof
                rows = proof_rows(proof)
                for row in rows:
                    assert row.total == pytest.approx(row.p, abs=2e-6), (r.round_index, row)
                assert sum(row.p for row in rows) == pytest.approx(1.0, abs=1e-5)
                assert sum(row.accepted_path for row in rows) == pytest.approx(proof.beta, abs=1e-9)
                p_used = dict(pos.target_top)
                for t, p, _q, _res in proof.rows:
                    if t in p_used:
                        assert p == pytest.approx(p_used[t], abs=1e-7)
                d = r.trace.drafted[i]
                listed = {t: (p, q) for t, p, q, _ in proof.rows}
                assert listed[d.token_id] == (pytest.approx(d.p, abs=1e-7), pytest.approx(d.q, abs=1e-7))
            assert all(pos.proof is None for k, pos in enumerate(r.trace.positions) if k != r.trace.rejected_index)
    assert seen >= 5


def test_proof_survives_the_trace_file(sampled_traces, tmp_path):
    from specchat.analysis.trace import read_trace, trace_records, write_trace

    events = sampled_traces[0]
    config = GenerationConfig(num_speculative_tokens=4, temperature=0.8, max_new_tokens=40, seed=5, trace=True)
    path = write_trace(tmp_path / "t.jsonl", trace_records(events, target="t", drafter="o", config=config,
                                                          prompt_ids=TINY_PROMPT))
    live = [pos.proof for e in events if isinstance(e, RoundEvent) for pos in e.trace.positions]
    back = [pos.proof for e in read_trace(path).events if isinstance(e, RoundEvent) for pos in e.trace.positions]
    assert back == live and any(p is not None for p in back)


def test_proof_view_in_the_inspector(sampled_traces):
    """A resampled token's inspector shows β, the three bar groups and |sum − p| at float precision."""
    from specchat.ui.html.inspector import ReplyRounds, inspector_html

    rr = ReplyRounds.of(sampled_traces[0])
    index = next(i for i, t in enumerate(rr.tokens) if t.kind.value == "resampled")
    html = inspector_html(1, rr, index, temperature=0.8)
    assert "min(p, q)" in html and "(1 − β)·p′" in html and "sum, over p" in html
    beta = float(re.search(r"= <b>([0-9.]+)</b> is the chance", html).group(1))
    tok = rr.tokens[index]
    proof = rr.rounds[tok.round_index].trace.positions[tok.position].proof
    assert beta == pytest.approx(proof.beta, abs=1e-4)
    gap = float(re.search(r"Largest \|sum − p\| over all \d+ rows: ([0-9.e+-]+)", html).group(1))
    assert gap < 1e-5
    # the drawn token's own numbers: min(p, q) + residual path = p(x)
    m = re.search(r"= ([0-9.]+) \+ ([0-9.]+) = <b>([0-9.]+)</b>, and p\(x\) = <b>([0-9.]+)</b>", html)
    a, b, total, p = (float(g) for g in m.groups())
    assert a + b == pytest.approx(total, abs=2e-4) and total == pytest.approx(p, abs=2e-4)
    # an accepted token's inspector has no proof view
    accepted = next(i for i, t in enumerate(rr.tokens) if t.kind.value == "accepted")
    assert "sum, over p" not in inspector_html(1, rr, accepted, temperature=0.8)


# ---- the views --------------------------------------------------------------------------------------
def _metrics(rounds):
    m = SpeculationMetrics()
    for r in rounds:
        m.update(r)
    return m


def test_ledger_html_states_counted_measured_and_predicted():
    rounds = _rounds()
    m = _metrics(rounds)  # α = 5 accepted / 6 judged; t₁ = 80 ms from the timing round
    ledger = count_ledger(rounds, sizes=SIZES, alpha=m.acceptance_rate, prefill_ms=500.0)
    html = ledger_html(ledger, m, title="Reply #1", drafter="sibling")
    assert "fewer" in html and "counted" in html and "measured" in html and "predicted" in html
    assert "1.62×" in html  # 13/8 = 1.625 counted arithmetic (rounded half to even)
    assert "2.67× fewer" in html  # 8 tokens / 3 passes
    assert "ĉ = 0.25" in html
    assert "mostly prefill (58%" in html
    assert "Is this drafter worth it?" in html


def test_headline_words():
    ledger = count_ledger(_rounds(), sizes=SIZES, alpha=0.8)
    assert headline(ledger, 2.4).startswith("2.40× faster while doing 1.62× the arithmetic")
    assert headline(ledger, 0.5).startswith("2.00× slower")
    assert "fewer target weight reads" in headline(ledger, None)


def test_worth_words_and_points():
    assert "above the line" in worth_words("int4", 0.8, 0.1)
    assert "no γ gives a speedup" in worth_words("sibling", 0.3, 0.4)
    assert "c needs" in worth_words("ngram", 0.5, None)
    a, b = _metrics(_rounds()), _metrics(_rounds()[:2])
    points = drafter_points([("sibling", a), ("int4", b), ("sibling", b), ("none", SpeculationMetrics())])
    assert [p.drafter for p in points] == ["sibling", "int4"]
    sib = points[0]
    assert sib.alpha == pytest.approx((5 + 5) / (6 + 6)) and sib.num_replies == 2
    assert sib.cost_ratio == pytest.approx(10 / 80)  # b has no t₁: only a's c = (80 ms / 8 drafted) / 80 ms
    assert points[1].cost_ratio is None


def test_worth_figure_has_the_line_and_each_drafter():
    from specchat.ui.charts import figures as charts
    from specchat.ui.html.ledger import DrafterPoint

    fig = charts.worth_figure([DrafterPoint("int4", 0.9, 0.6, 1, 10), DrafterPoint("ngram", 0.4, 0.01, 2, 20)], "int4")
    line = next(t for t in fig.data if t.name == "α = c")
    assert list(line.x) == list(line.y)
    names = {t.name: t for t in fig.data if t.mode == "markers+text"}
    assert set(names) == {"int4", "ngram"}
    assert names["int4"].marker.size > names["ngram"].marker.size
    assert (names["ngram"].x[0], names["ngram"].y[0]) == (0.01, 0.4)
    assert names["int4"].text[0] == "int4 (1 reply)"  # pooled over its replies, never called "this reply"
    assert "needs a reply" in charts.worth_figure([]).layout.annotations[0].text
    # the reply in view is its own point: a pooled α of 0.58 is not this reply's α of 1.00
    fig = charts.worth_figure([DrafterPoint("ngram", 0.58, 0.01, 3, 30)], "ngram", DrafterPoint("ngram", 1.0, 0.02, 1, 8))
    mine = next(t for t in fig.data if t.name == "this reply")
    assert (mine.x[0], mine.y[0]) == (0.02, 1.0)
    assert next(t for t in fig.data if t.name == "ngram").text[0] == "ngram (3 replies)"


def test_worth_words_with_the_measured_costs():
    """The hand-built reply: t₁ = 80 ms (the timing round), d = 80 ms / 8 drafted = 10 ms, v = 100 ms
    (both drafting rounds check 5 positions), α = 5/6. Verifying γ + 1 = 5 costs 100/80 = 1.25
    steps; S(γ) = E[N](5/6, γ)·80 / (10γ + 100): γ = 6 → 4.3255·80/160 = 2.163, γ = 7 →
    4.6046·80/170 = 2.167, γ = 8 → 4.8372·80/180 = 2.150, so the best is γ = 7 at 2.17×."""
    thin = _metrics(_rounds())  # 6 judged drafts and one timed target step: no best γ from that
    assert worth_words("sibling", thin.acceptance_rate, thin.cost_ratio, thin) == (
        "sibling: α = 0.83 > c = 0.125, above the line: by the textbook rule some γ speeds decoding up (6 judged draft(s): too few for a "
        "best γ).")
    m = _metrics(_rounds() * 3)  # the same reply three times over: 18 judged drafts, 3 target steps
    words = worth_words("sibling", m.acceptance_rate, m.cost_ratio, m)
    assert "α = 0.83 > c = 0.125" in words
    assert "costs 1.25 steps (measured at γ + 1 = 5)" in words
    assert "the best is γ = 7 at 2.17×." in words


def test_proof_view_shows_the_rejected_draft_and_sums_the_rest():
    """Twelve tokens, p = 0.25, 0.12, 0.11, 0.10, …, 0.04, 0.02 and the draft x = 11 with p 0.01 and
    q one-hot: β = p(11) = 0.01. The view keeps the top 10 under p plus the drawn and the rejected
    token, and sums the one left (p 0.02) into "the rest": the rows shown add up to 1."""
    from specchat.core.roundtrace import RoundTrace, proof_trace
    from specchat.core.sampling import residual_probs
    from specchat.ui.html.inspector import proof_html

    p = torch.tensor([0.25, 0.12, 0.11, 0.10, 0.09, 0.08, 0.07, 0.06, 0.05, 0.04, 0.02, 0.01])
    proof = proof_trace(p, None, 11, residual_probs(p, None, 11))
    assert proof.beta == pytest.approx(0.01)
    trace = RoundTrace(drafted=(), next_token_id=0, next_kind="resampled", committed=(), positions=(),
                       token_texts={i: f"t{i}" for i in range(12)})
    html = proof_html(trace, proof, drawn=0, rejected=11)
    labels = re.findall(r'<td class="spec-bar-label">([^<]*)</td>', html)
    assert labels == [f"t{i}" for i in range(10)] + ["t11", "the rest"]
    rest = re.search(r"the rest</td>.*?([0-9.e-]+) = p ([0-9.e-]+)</span>", html).groups()
    assert float(rest[1]) == pytest.approx(0.02, abs=1e-3)  # t10 alone: p 0.02
    assert "(float precision)" in html
    # a damaged proof says so
    from specchat.analysis.trace import ProofTrace

    bad = ProofTrace(0.5, ((0, 0.9, 0.1, 0.1),), (0.0, 0.0, 0.0))
    assert "do not add up" in proof_html(trace, bad, drawn=0)


def test_bad_model_sizes_in_a_trace_are_ignored():
    for bad in ({"target": {"matmul_params": 10, "weight_bytes": 5}, "drafter": {"matmul_params": -3, "weight_bytes": 1}},
                {"target": {"matmul_params": float("inf"), "weight_bytes": 5}},
                {"target": {"matmul_params": 10, "weight_bytes": -5}},
                {"target": {"matmul_params": 10.5, "weight_bytes": 5}},
                {"target": {"matmul_params": True, "weight_bytes": 5}}):
        assert ModelSizes.from_json(bad) is None, bad


def test_unknown_drafter_size_leaves_c_hat_unknown():
    """A model drafter ran (draft steps > 0) but its size is missing: no ĉ, no arithmetic, and the
    ledger says so instead of calling it 0."""
    rounds = _rounds()
    ledger = count_ledger(rounds, sizes=ModelSizes(ModelSize(400, 1000)), alpha=0.8)
    assert ledger.flop_ratio is None and ledger.arithmetic is None
    html = ledger_html(ledger, _metrics(rounds), title="t", drafter="int4")
    assert "ĉ unknown" in html and "ĉ = 0" not in html
    assert "faster than target-only (measured)" in headline(ledger, 1.3)


def test_nothing_drafted_headline():
    rounds = [RoundEvent(i, 0, 0, 0, 1, (), 0.0, 0, 50.0, 0.0, 50.0) for i in range(3)]
    assert headline(count_ledger(rounds), 1.0).startswith("Nothing was drafted")


def test_prefill_line_says_how_much_was_reused():
    """A prompt of 400 tokens of which the prefill computed 23: the last prompt token is fed by
    the first round, so 400 − 1 − 23 = 376 were reused from the kept cache."""
    ledger = count_ledger(_rounds(), sizes=SIZES, alpha=0.8, prefill_ms=900.0, num_prefilled=23, num_prompt_tokens=400)
    html = ledger_html(ledger, _metrics(_rounds()), title="t", drafter="sibling")
    assert "Prefill 0.90 s for 23 new prompt tokens (376 reused from the conversation's kept cache)" in html
    first = count_ledger(_rounds(), prefill_ms=900.0, num_prefilled=399, num_prompt_tokens=400)
    assert "for 399 new prompt tokens," in ledger_html(first, _metrics(_rounds()), title="t", drafter="x")


def test_the_ledger_holds_the_speedup_back_as_the_stats_line_does():
    """One timed target step (80 ms; 8 tokens in 360 ms: N·t₁/D = 1.78×) is too few (3 needed): the
    headline gives no "faster" or "slower" and says why, in the stats line's words."""
    rounds = _rounds()
    m = _metrics(rounds)
    assert m.measured_speedup == pytest.approx(8 * 80.0 / 360.0)
    html = ledger_html(count_ledger(rounds, sizes=SIZES, alpha=m.acceptance_rate), m, title="t", drafter="sibling")
    head = html.split('spec-ledger-headline">')[1].split("</div>")[0]
    assert "faster" not in head and "slower" not in head
    assert head.endswith("(the speedup is held back: timing: 1 target step of the 3 needed).")
