"""Engine tests on tiny random models (fp32): greedy identity, bookkeeping, events, stops.

Expected values come from first principles: a naive greedy loop that runs the target on the
whole sequence each step (no cache, no engine), and exact distributions by enumeration.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from tiny_models import byte_tokenizer, tiny_model

from specchat.config import GenerationConfig
from specchat.drafters import Draft, ModelDrafter, NgramDrafter
from specchat.engine import SpeculativeEngine
from specchat.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.metrics import SpeculationMetrics

VOCAB = 257  # byte tokenizer: 256 bytes + <eos>
PROMPT = list(b"def add(a, b):\n    return a + b\n\ndef add(a, b):\n")


@pytest.fixture(scope="module")
def target():
    return tiny_model(vocab_size=VOCAB, seed=0)


@pytest.fixture(scope="module")
def other():
    # a different family with a padded embedding (300 rows > 257 ids): mostly wrong drafts
    return tiny_model(vocab_size=300, seed=1, family="qwen2")


@torch.inference_mode()
def naive_greedy(model, prompt, n):
    """Target-only greedy decoding from first principles: full forward each step, argmax."""
    ids = list(prompt)
    for _ in range(n):
        logits = model(torch.tensor([ids])).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def run(engine, drafter, prompt=PROMPT, **cfg):
    events = list(engine.generate(prompt, drafter, GenerationConfig(**cfg)))
    assert isinstance(events[-1], DoneEvent)
    return events


class ScriptedDrafter:
    """Proposes the reference continuation for k tokens, then a wrong token; checks caches."""

    name = "scripted"

    def __init__(self, engine, reference, k):
        self.engine, self.reference, self.k = engine, reference, k
        self.prompt_len = 0
        self.requests = []

    def begin(self, prompt_ids):
        self.prompt_len = len(prompt_ids)

    def propose(self, ids, max_tokens, config, generator):
        # bookkeeping: the target cache holds exactly the committed tokens but the last
        assert self.engine.target_cache.get_seq_length() == len(ids) - 1
        self.requests.append(max_tokens)
        done = len(ids) - self.prompt_len
        ref = self.reference[done : done + max_tokens]
        out = ref[: self.k]
        if len(out) < max_tokens and len(ref) > self.k:
            out = out + [(ref[self.k] + 1) % VOCAB]
        out = out + [0] * (max_tokens - len(out))
        return Draft(torch.tensor(out[:max_tokens]), None, 0)

    def rollback(self, num_valid):
        pass

    def end(self):
        pass


@pytest.fixture(scope="module")
def engine(target):
    return SpeculativeEngine(target, byte_tokenizer(), eos_token_ids=[])


@pytest.fixture(scope="module")
def reference(target):
    return naive_greedy(target, PROMPT, 40)


def test_target_only_matches_naive_loop(engine, reference):
    done = run(engine, None, max_new_tokens=40)[-1]
    assert list(done.token_ids) == reference
    assert all(k is TokenKind.BONUS for k in done.kinds)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ["self", "other", "ngram"])
def test_greedy_identity_every_drafter(engine, target, other, reference, kind, gamma):
    model = {"self": target, "other": other}.get(kind)
    drafter = (
        NgramDrafter()
        if kind == "ngram"
        else ModelDrafter(model, target_vocab_size=VOCAB, num_tokenizer_ids=VOCAB, name=kind)
    )
    done = run(engine, drafter, num_speculative_tokens=gamma, max_new_tokens=40)[-1]
    assert list(done.token_ids) == reference
    if kind == "self":  # the target drafting for itself is always right
        assert sum(k is TokenKind.ACCEPTED for k in done.kinds) >= 40 * gamma // (gamma + 1) - gamma


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_scripted_partial_acceptance(engine, reference, gamma):
    for k in range(gamma + 1):
        drafter = ScriptedDrafter(engine, reference, k)
        events = run(engine, drafter, num_speculative_tokens=gamma, max_new_tokens=30)
        assert list(events[-1].token_ids) == reference[:30]
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        for r in rounds[:-1]:  # the last round may be cut by the budget
            assert r.num_accepted == min(k, r.num_drafted)
            expected_kind = TokenKind.BONUS if k >= r.num_drafted else TokenKind.RESAMPLED
            assert r.num_committed == r.num_accepted + 1
        assert all(n <= 30 - 1 for n in drafter.requests)


def test_event_structure_and_counts(engine, other):
    drafter = ModelDrafter(other, target_vocab_size=VOCAB, num_tokenizer_ids=VOCAB, name="other")
    events = run(engine, drafter, num_speculative_tokens=4, max_new_tokens=50, temperature=1.0, seed=3)
    metrics = SpeculationMetrics()
    pending: list[TokenEvent] = []
    for e in events:
        metrics.update(e)
        if isinstance(e, TokenEvent):
            pending.append(e)
        elif isinstance(e, RoundEvent):
            kinds = [t.kind for t in pending]
            assert kinds[: e.num_accepted] == [TokenKind.ACCEPTED] * e.num_accepted
            assert len(kinds) == e.num_committed
            if e.num_committed == e.num_accepted + 1:
                assert kinds[-1] in (TokenKind.RESAMPLED, TokenKind.BONUS)
                assert (kinds[-1] is TokenKind.BONUS) == (e.num_accepted == e.num_drafted)
            assert all(t.round_index == e.round_index for t in pending)
            pending = []
    done = events[-1]
    assert metrics.num_tokens == len(done.token_ids) == 50
    assert metrics.num_accepted == sum(k is TokenKind.ACCEPTED for k in done.kinds)
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text


def test_stop_inside_multi_token_commit(engine, target, reference):
    drafter = ModelDrafter(target, target_vocab_size=VOCAB, num_tokenizer_ids=VOCAB, name="self")
    # budget: 5 tokens although a round could commit 9
    done = run(engine, drafter, num_speculative_tokens=8, max_new_tokens=5)[-1]
    assert list(done.token_ids) == reference[:5] and done.stop_reason is StopReason.MAX_NEW_TOKENS
    # EOS at the 3rd reference token (first occurrence): the reply ends there
    eos = reference[2]
    first = reference.index(eos)
    eos_engine = SpeculativeEngine(target, byte_tokenizer(), eos_token_ids=[eos])
    events = run(eos_engine, drafter, num_speculative_tokens=8, max_new_tokens=40)
    assert list(events[-1].token_ids) == reference[: first + 1]
    assert events[-1].stop_reason is StopReason.EOS
    assert sum(isinstance(e, TokenEvent) for e in events) == first + 1


def test_stop_string_cuts_text_and_stream(engine, target, reference):
    tok = byte_tokenizer()
    full = tok.decode(reference, skip_special_tokens=True)
    stop = full[6:8]
    cut = full.index(stop)
    drafter = ModelDrafter(target, target_vocab_size=VOCAB, num_tokenizer_ids=VOCAB, name="self")
    events = run(engine, drafter, num_speculative_tokens=8, max_new_tokens=40, stop_strings=(stop,))
    done = events[-1]
    assert done.stop_reason is StopReason.STOP_STRING
    assert done.text == full[:cut]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == full[:cut]
    assert list(done.token_ids) == reference[: len(done.token_ids)]


def test_context_window_bounds(target):
    eng = SpeculativeEngine(target, None, eos_token_ids=[], context_length=len(PROMPT) + 3)
    ref = naive_greedy(target, PROMPT, 3)
    drafter = ModelDrafter(target, target_vocab_size=VOCAB, num_tokenizer_ids=VOCAB, name="self")
    done = run(eng, drafter, num_speculative_tokens=8, max_new_tokens=40)[-1]
    assert list(done.token_ids) == ref and done.stop_reason is StopReason.CONTEXT_FULL
    with pytest.raises(ValueError, match="no room"):
        list(SpeculativeEngine(target, None, context_length=len(PROMPT)).generate(PROMPT, None, GenerationConfig()))
    with pytest.raises(ValueError, match="empty"):
        list(eng.generate([], None, GenerationConfig()))


def test_cancel_stops_between_rounds_and_engine_is_reusable(engine, reference):
    import threading

    cancel = threading.Event()
    events = []
    for e in engine.generate(PROMPT, NgramDrafter(), GenerationConfig(max_new_tokens=40), cancel):
        events.append(e)
        if isinstance(e, RoundEvent) and e.round_index == 2:
            cancel.set()
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED
    assert list(done.token_ids) == reference[: len(done.token_ids)]
    assert run(engine, None, max_new_tokens=40)[-1].token_ids == tuple(reference)


@torch.inference_mode()
def exact_second_token_distribution(model, prompt, temperature, top_k, top_p):
    from specchat.sampling import logits_to_probs

    def probs(ids):
        return logits_to_probs(model(torch.tensor([ids])).logits[0, -1:], temperature=temperature, top_k=top_k, top_p=top_p)[0].double()

    p1 = probs(prompt)
    out = torch.zeros_like(p1)
    for t in torch.nonzero(p1).flatten().tolist():
        out += p1[t] * probs(prompt + [t])
    return p1, out


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8)])
def test_sampled_tokens_follow_exact_target_distribution(temperature, top_k, top_p):
    """Chi-square of the first two emitted tokens against the exact target distribution.

    Vocabulary 12; 1500 samples through a drafter from another random model (γ=2), fixed
    seeds. Significance 1e-3 per check: with random seeds a correct engine fails 0.2% of runs.
    """
    tgt = tiny_model(vocab_size=12, seed=5, init_std=0.15)
    drf = tiny_model(vocab_size=12, seed=6, init_std=0.15)
    prompt = [1, 2, 3]
    p1, p2 = exact_second_token_distribution(tgt, prompt, temperature, top_k, top_p)
    eng = SpeculativeEngine(tgt, None, eos_token_ids=[])
    drafter = ModelDrafter(drf, target_vocab_size=12, num_tokenizer_ids=12, name="other")
    n = 1500
    c1, c2 = torch.zeros(12), torch.zeros(12)
    for seed in range(n):
        cfg = GenerationConfig(num_speculative_tokens=2, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=2)
        done = list(eng.generate(prompt, drafter, cfg))[-1]
        c1[done.token_ids[0]] += 1
        c2[done.token_ids[1]] += 1
    for counts, exact in ((c1, p1), (c2, p2)):
        support = exact > 0
        assert counts[~support].sum() == 0  # nothing outside top-k / top-p is ever emitted
        expected = exact[support] / exact[support].sum() * n  # renormalise float rounding
        assert chisquare(counts[support].tolist(), expected.tolist()).pvalue > 1e-3
