"""Round traces checked against first principles (issue 12).

The trace's own numbers are never fed back as the expectation: acceptance is recomputed from
u, p and q with the rule of Leviathan et al. 2023 (u·q < p, float32); at temperature 0 the
committed token must be the argmax of the raw target list and the committed ids must equal the
target-only greedy reply of a naive full-sequence loop; the residual is recomputed from the
two top lists; a trace file read back renders the same HTML as the live reply.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from lossless import TINY_PROMPT, TINY_VOCAB
from tiny_models import byte_tokenizer

from specchat.analysis.trace import TRACE_TOP_K, TraceError, read_trace, trace_records, write_trace
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent, TokenKind
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime

CASES = [  # (drafter, temperature, top_p)
    ("model", 0.0, 1.0),
    ("model", 0.9, 1.0),
    ("model", 1.0, 0.8),
    ("ngram", 0.0, 1.0),
    ("ngram", 0.7, 1.0),
]


def _drafter(kind, other):
    if kind == "ngram":
        return NgramDrafter()
    return ModelDrafter(TransformersRuntime(other), target_vocab_size=TINY_VOCAB, num_tokenizer_ids=257, name="other")


@pytest.fixture(scope="module")
def traces(engine, other):
    """One traced generation per case: (case, events)."""
    out = {}
    for case in CASES:
        kind, temperature, top_p = case
        config = GenerationConfig(num_speculative_tokens=4, temperature=temperature, top_p=top_p,
                                  max_new_tokens=40, seed=3, trace=True)
        out[case] = list(engine.generate(TINY_PROMPT, _drafter(kind, other), config))
    return out


def _rounds(events):
    return [e for e in events if isinstance(e, RoundEvent)]


@pytest.mark.parametrize("case", CASES)
def test_acceptance_rule_holds_for_every_judged_draft(traces, case):
    judged = 0
    for r in _rounds(traces[case]):
        seen_reject = False
        for d in r.trace.drafted:
            if seen_reject:  # after the first rejection nothing is judged
                assert d.u is None and d.accepted is None
                continue
            assert d.u is not None and 0.0 <= d.u < 1.0
            expected = bool(np.float32(d.u) * np.float32(d.q) < np.float32(d.p))
            assert d.accepted is expected, (r.round_index, d)
            judged += 1
            seen_reject = not d.accepted
    assert judged > 10


@pytest.mark.parametrize("case", CASES)
def test_committed_ids_equal_the_output(traces, case):
    events = traces[case]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    ids = [c.token_id for r in _rounds(events) for c in r.trace.committed]
    assert ids == list(done.token_ids)
    # and the committed tokens are the accepted drafts, then the next token
    for r in _rounds(events):
        tr = r.trace
        accepted = [d.token_id for d in tr.drafted if d.accepted]
        n_acc = tr.rejected_index if tr.rejected_index is not None else len(tr.drafted)
        expected = [d.token_id for d in tr.drafted[:n_acc]] + [tr.next_token_id]
        assert [c.token_id for c in tr.committed] == expected[: len(tr.committed)]
        assert accepted[:n_acc] == expected[:n_acc]
        if len(tr.committed) == n_acc + 1:  # not cut by a stop
            assert tr.next_kind == ("target" if not tr.drafted else
                                    "bonus" if n_acc == len(tr.drafted) else "resampled")
        else:  # a stop cut the round: the drafts after it count for nothing, as in α
            assert all(d.u is None for d in tr.drafted[len(tr.committed):])
            assert list(r.accepted_mask) == [d.accepted for d in tr.drafted if d.accepted is not None]


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == 0.0])
def test_greedy_commits_the_argmax_of_the_raw_target_list(traces, case, reference):
    events = traces[case]
    for r in _rounds(events):
        for pos, c in enumerate(r.trace.committed):
            raw = r.trace.positions[pos].target_top_raw
            assert c.token_id == raw[0][0]
            assert raw[0][1] > raw[1][1]  # the tiny target's argmaxes are decisive
    # and the output is the target-only greedy reply of a naive loop (first principles)
    assert list(events[-1].token_ids) == list(reference[: len(events[-1].token_ids)])


@pytest.mark.parametrize("case", CASES)
def test_top_lists_are_sorted_and_sum_to_at_most_one(traces, case):
    for r in _rounds(traces[case]):
        assert len(r.trace.positions) == len(r.trace.drafted) + 1
        for i, pos in enumerate(r.trace.positions):
            lists = [pos.target_top, pos.target_top_raw, pos.draft_top, pos.draft_top_raw, pos.residual_top]
            for top in lists:
                if top is None:
                    continue
                probs = [p for _, p in top]
                assert 1 <= len(top) <= TRACE_TOP_K
                assert probs == sorted(probs, reverse=True)
                assert all(p > 0 for p in probs)
                assert sum(probs) <= 1.0 + 1e-5
            if i == len(r.trace.drafted):
                assert pos.draft_top is None  # the extra position has no q
            if case[0] == "model" and i < len(r.trace.drafted):
                assert pos.draft_top_raw is not None
            if case[0] == "ngram":
                assert pos.draft_top_raw is None
                if i < len(r.trace.drafted):
                    assert pos.draft_top == ((r.trace.drafted[i].token_id, 1.0),)


def test_raw_lists_are_the_softmax_of_the_logits(engine, target):
    """Position 0's raw target list equals softmax(logits) of a plain forward pass over the prompt."""
    config = GenerationConfig(num_speculative_tokens=2, temperature=0.0, max_new_tokens=1, seed=0, trace=True)
    events = list(engine.generate(TINY_PROMPT, None, config))
    raw = _rounds(events)[0].trace.positions[0].target_top_raw
    with torch.no_grad():
        logits = target(input_ids=torch.tensor([TINY_PROMPT])).logits[0, -1].float()
    probs = torch.softmax(logits, dim=-1)
    values, ids = torch.topk(probs, TRACE_TOP_K)
    assert [t for t, _ in raw] == ids.tolist()
    assert np.allclose([p for _, p in raw], values.tolist(), atol=1e-5)


@pytest.mark.parametrize("case", [c for c in CASES if c[1] > 0])
def test_the_residual_excludes_mass_where_q_is_at_least_p(traces, case):
    seen = 0
    for r in _rounds(traces[case]):
        for i, pos in enumerate(r.trace.positions):
            if pos.residual_top is None:
                continue
            assert i == r.trace.rejected_index  # only at the rejection
            seen += 1
            p = dict(pos.target_top)
            q = dict(pos.draft_top)
            rejected = r.trace.drafted[i].token_id
            for token, mass in pos.residual_top:
                assert mass > 0
                if token in p and token in q:
                    assert p[token] > q[token]  # a token with q >= p has no residual mass
                if case[0] == "ngram":
                    assert token != rejected  # one-hot q: the rejected draft is removed
            # the resampled token was drawn from it
            committed = r.trace.committed[-1] if len(r.trace.committed) == i + 1 else None
            if committed is not None and committed.token_id not in dict(pos.residual_top):
                assert len(pos.residual_top) == TRACE_TOP_K  # only possible beyond the top k
    assert seen > 0


def test_residual_by_hand():
    """p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2): max(0, p − q) = (0.3, 0, 0) → one token, mass 1."""
    from specchat.core.events import TokenKind
    from specchat.core.roundtrace import build_round_trace
    from specchat.core.sampling import VerifyResult

    target_probs = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    draft_probs = torch.tensor([[0.2, 0.6, 0.2]])
    result = VerifyResult(0, (False,), 0, TokenKind.RESAMPLED, torch.tensor([0.9]))
    resampled = TokenEvent(0, TokenKind.RESAMPLED, "0", 0.5, None, 1, 0.3, 0.6, 0, 0, 1)
    tr = build_round_trace(
        draft_ids=torch.tensor([1]), draft_probs=draft_probs, draft_trace=None,
        target_logits=torch.log(target_probs), target_probs=target_probs, result=result,
        token_events=[resampled], token_text=str,
    )
    assert tr.positions[0].residual_top == ((0, 1.0),)
    d = tr.drafted[0]
    assert (d.p, d.q, d.u, d.accepted) == (pytest.approx(0.3), pytest.approx(0.6), pytest.approx(0.9), False)
    assert [t for t, _ in tr.positions[0].target_top_raw] == [0, 1, 2]


def test_ngram_source_points_at_the_copied_text(traces):
    events = traces[("ngram", 0.0, 1.0)]
    sources = 0
    context = list(TINY_PROMPT)
    for r in _rounds(events):
        tr = r.trace
        if tr.copy_start is not None:
            sources += 1
            n, s, m = len(tr.drafted), tr.copy_start, tr.match_len
            assert [d.token_id for d in tr.drafted] == context[s: s + n]
            assert context[s - m: s] == context[len(context) - m:]
            assert tr.source_text[1] == byte_tokenizer().decode(context[s - m: s])
        context += [c.token_id for c in tr.committed]
    assert sources > 0


def test_trace_off_records_nothing(engine, other):
    config = GenerationConfig(num_speculative_tokens=3, temperature=0.8, max_new_tokens=12, seed=1)
    events = list(engine.generate(TINY_PROMPT, _drafter("model", other), config))
    assert all(r.trace is None for r in _rounds(events))


def test_trace_does_not_change_the_output(engine, other):
    """Same seed, trace on or off: the same tokens (the trace only reads)."""
    out = []
    for trace in (False, True):
        config = GenerationConfig(num_speculative_tokens=3, temperature=0.9, max_new_tokens=30, seed=11, trace=trace)
        out.append(list(engine.generate(TINY_PROMPT, _drafter("model", other), config))[-1].token_ids)
    assert out[0] == out[1]


def test_file_round_trip_and_schema(traces, tmp_path):
    events = traces[("model", 0.9, 1.0)]
    config = GenerationConfig(num_speculative_tokens=4, temperature=0.9, max_new_tokens=40, seed=3, trace=True)
    path = write_trace(tmp_path / "t.jsonl", trace_records(events, target="tiny", drafter="other", config=config,
                                                          prompt_ids=TINY_PROMPT, message="hi"))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["prompt_ids"] == list(TINY_PROMPT)
    assert lines[0]["target"] == "tiny" and lines[0]["config"]["temperature"] == 0.9
    assert lines[-1]["type"] == "done"
    rounds = lines[1:-1]
    assert all(r["type"] == "round" for r in rounds)
    committed = []
    for r in rounds:
        for key in ("round", "drafted", "next", "positions", "draft_ms", "verify_ms"):
            assert key in r
        for d in r["drafted"]:
            assert set(d) >= {"token_id", "text", "p", "q", "u", "accepted"}
            if d["u"] is not None:  # the rule, on the file's numbers
                assert d["accepted"] is bool(np.float32(d["u"]) * np.float32(d["q"]) < np.float32(d["p"]))
        assert r["next"]["kind"] == ("target" if not r["drafted"] else
                                     "bonus" if all(d["accepted"] for d in r["drafted"]) else "resampled")
        for pos in r["positions"]:
            assert set(pos) >= {"target_top", "draft_top", "target_top_raw", "draft_top_raw", "residual_top"}
        committed += [c["token_id"] for c in r["committed"]]
    assert committed == lines[-1]["token_ids"]
    # read back: the same events
    back = read_trace(path)
    live_tokens = [(e.token_id, e.kind, e.text, e.round_index) for e in events if isinstance(e, TokenEvent)]
    read_tokens = [(e.token_id, e.kind, e.text, e.round_index) for e in back.events if isinstance(e, TokenEvent)]
    assert read_tokens == live_tokens
    assert back.done.token_ids == events[-1].token_ids


def test_replayed_reply_renders_like_the_live_one(traces, tmp_path):
    """The app's chat bubble of a reply read from its trace file equals the live one's (same
    colors, same text, same clickable tokens, same rejected drafts), with no model loaded."""
    from specchat.ui.session.chat import ChatSession, Reply, ReplySettings

    events = traces[("model", 1.0, 0.8)]
    settings = ReplySettings("other", 4, False, 1.0, 0.8, 40)
    live = Reply(1, "hi", settings)
    for e in events:
        live.add(e)
    path = write_trace(tmp_path / "t.jsonl", live.trace_lines("tiny"))

    class NoModel:
        target_name = "tiny"
        loading = False
        startup_error = None

        def stream_chat(self, *a, **k):
            raise AssertionError("a replay must not generate")

    session = ChatSession(NoModel())
    session.open_trace(str(path))
    replayed = session.views.replies[0]
    for show in (False, True):
        assert replayed.renderer.html(show_rejected=show) == live.renderer.html(show_rejected=show)
    assert "tok-rejected" in live.renderer.html(show_rejected=True)
    assert replayed.metrics.acceptance_rate == live.metrics.acceptance_rate
    assert "replayed from t.jsonl" in replayed.label
    # every view works on it
    view = session.views.select("1:3")
    assert "reply #1" in view.inspector and "rref-1-" in view.timeline


@pytest.mark.parametrize("content, match", [
    ("", "empty"),
    ("not json\n", "not JSON"),
    ('{"type": "round"}\n', "header"),
    ('{"type": "header"}\n{"type": "round", "round": 0}\n', "line 2"),
    ('{"type": "header"}\n{"type": "what"}\n', "unknown record type"),
    ('{"type": "header", "version": 3}\n', "version 3.*upgrade specchat"),
])
def test_bad_trace_files_get_a_clear_error(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceError, match=match):
        read_trace(path)


def test_cli_trace_option_checks(tmp_path, capsys):
    from specchat.commands.cli import main

    assert main(["generate", "--prompt", "x", "--trace", str(tmp_path / "t.jsonl"), "--num-samples", "2"]) == 2
    assert "one generation" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--trace", str(tmp_path / "no" / "dir" / "t.jsonl")]) == 2
    assert "cannot write the trace" in capsys.readouterr().err


def test_byte_tokenizer_texts(traces):
    """Each drafted token's text is its byte (the tiny tokenizer's ids are bytes)."""
    tok = byte_tokenizer()
    for r in _rounds(traces[("model", 0.0, 1.0)]):
        for d in r.trace.drafted:
            assert r.trace.token_texts[d.token_id] == tok.decode([d.token_id])


def _round_line(index, drafted, committed, next_kind, version_kinds):
    """A hand-written round record: ``drafted`` = [(token, accepted)], ``committed`` = [(token, kind)]."""
    n = len(drafted)
    return {
        "type": "round", "round": index, "num_speculative_tokens": n, "num_accepted": sum(a for _, a in drafted),
        "num_committed": len(committed), "accepted_mask": [a for _, a in drafted], "draft_ms": 0.0, "draft_steps": 0,
        "verify_ms": 10.0, "elapsed_ms": 10.0 * (index + 1), "round_ms": 10.0,
        "drafted": [{"token_id": t, "text": "x", "p": 1.0, "q": 1.0, "u": 0.5, "accepted": a} for t, a in drafted],
        "next": {"token_id": committed[-1][0], "text": "x", "kind": next_kind},
        "committed": [{"token_id": t, "kind": version_kinds(k), "text": "x", "p": 1.0, "q": None} for t, k in committed],
        "positions": [{"target_top": [[t, 1.0]], "draft_top": None, "target_top_raw": [[t, 1.0]], "draft_top_raw": None,
                       "residual_top": None} for t, _ in committed],
    }


@pytest.mark.parametrize("version", [None, 1, 2])
def test_old_traces_open_with_the_target_kind(tmp_path, version):
    """Version 1 called the one token of a round with no draft "bonus"; it reads as "target". A
    bonus after a full acceptance stays a bonus. Files written by hand, not by specchat."""
    old = lambda k: "bonus" if version != 2 and k == "target" else k  # noqa: E731
    header = {"type": "header", "target": "t", "drafter": "ngram", "config": {}, "prompt_ids": [1, 2]}
    if version is not None:
        header["version"] = version
    rounds = [
        _round_line(0, [], [(5, "target")], old("target"), old),
        _round_line(1, [(6, True), (7, True)], [(6, "accepted"), (7, "accepted"), (8, "bonus")], "bonus", old),
        _round_line(2, [(9, True), (3, False)], [(9, "accepted"), (10, "resampled")], "resampled", old),
    ]
    done = {"type": "done", "token_ids": [5, 6, 7, 8, 9, 10], "stop_reason": "max_new_tokens", "text": "xxxxxx",
            "kinds": [old(k) for k in ("target", "accepted", "accepted", "bonus", "accepted", "resampled")]}
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [header, *rounds, done]) + "\n", encoding="utf-8")
    trace = read_trace(path)
    A, R, B, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET
    expected = [T, A, A, B, A, R]
    assert [e.kind for e in trace.events if isinstance(e, TokenEvent)] == expected
    assert list(trace.done.kinds) == expected
    assert [e.trace.next_kind for e in trace.events if isinstance(e, RoundEvent)] == ["target", "bonus", "resampled"]
