"""Adversarial probes of the speculative engine (bookkeeping, alignment, numerics, stops, lifecycle).

Every expectation comes from first principles: a target-only greedy loop, exact distributions by
enumeration with an independent float64 warper, hand-computed numbers, or the documented contract.

Most probes use ``FakeLM``: an HF-shaped causal LM whose next-token logits are a pure function
of the prefix it *reads back from its own KV cache*. A cache that holds a rejected token, misses
a committed one, or is misaligned therefore changes the logits, and every forward is recorded,
so the cache contents can be checked against the committed sequence after every round. It is
also ~10x faster than a tiny transformer, which makes large chi-square samples affordable.
"""

from __future__ import annotations

import gc
import math
import threading
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chisquare
from tiny_models import byte_tokenizer, tiny_model
from transformers import DynamicCache, LlamaConfig, Qwen2Config, Qwen2ForCausalLM

from specchat.config import GenerationConfig
from specchat.drafters import Draft, ModelDrafter, NgramDrafter
from specchat.engine import SpeculativeEngine
from specchat.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from specchat.kv import CacheRollbackError, cut_cache
from specchat.sampling import residual_probs, verify_draft

torch.set_num_threads(1)

EOS_BYTE = 256  # byte tokenizer: ids 0..255 are bytes, 256 is <eos>


# ---------------------------------------------------------------------------------------------
# Fake models
# ---------------------------------------------------------------------------------------------
class FakeLM(torch.nn.Module):
    """HF-like causal LM: logits = ``logits_fn(prefix)`` where the prefix is read from the cache.

    The token ids are stored in the KV cache as keys, so the model sees exactly what the cache
    holds. ``calls`` records ``(cached_prefix, new_ids)`` of every forward. A forward that would
    use a position >= ``max_positions`` fails the test (context bound).
    """

    def __init__(self, vocab: int, logits_fn, *, max_positions: int = 4096):
        super().__init__()
        self.config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=4,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            num_key_value_heads=1,
            max_position_embeddings=max_positions,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.logits_fn = logits_fn
        self.max_positions = max_positions
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def forward(self, input_ids, cache=None, use_cache=True, logits_to_keep=0, **kwargs):
        new = [int(t) for t in input_ids[0].tolist()]
        if cache is not None:
            k = input_ids.to(torch.float64).view(1, 1, -1, 1)
            keys, _ = cache.update(k, k.clone(), 0)
            full = [int(x) for x in keys.reshape(-1).tolist()]
        else:
            full = list(new)
        assert len(full) <= self.max_positions, f"position {len(full) - 1} past the context of {self.max_positions}"
        n = len(new)
        self.calls.append((tuple(full[: len(full) - n]), tuple(new)))
        keep = n if not logits_to_keep else min(int(logits_to_keep), n)
        rows = [self.logits_fn(full[: len(full) - n + i + 1]) for i in range(n - keep, n)]
        logits = torch.stack(rows).to(torch.float32)
        assert logits.shape[-1] == self.vocab
        return SimpleNamespace(logits=logits[None])


def hashed_logits(vocab: int, seed: int, scale: float):
    """Pseudo-random logits depending on the last two tokens and the prefix length mod 3."""
    v = torch.arange(vocab, dtype=torch.float64)

    def fn(prefix):
        a = prefix[-2] if len(prefix) >= 2 else -1
        b = prefix[-1]
        x = torch.sin(v * 12.9898 + (a + 2) * 78.233 + (b + 1) * 37.719 + (len(prefix) % 3) * 4.1 + seed * 11.3)
        x = x * 43758.5453
        return (scale * (x - torch.floor(x))).to(torch.float32)

    return fn


def script_logits(vocab: int, script: list[int], prompt_len: int, after: int):
    """A target that says ``script`` (then ``after`` forever), decisively: logit 10 vs 0."""

    def fn(prefix):
        i = len(prefix) - prompt_len
        out = torch.zeros(vocab)
        out[script[i] if 0 <= i < len(script) else after] = 10.0
        return out

    return fn


def cache_tokens(cache) -> list[int]:
    layer = cache.layers[0]
    if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
        return []
    return [int(x) for x in layer.keys.reshape(-1).tolist()]


def model_drafter(model, vocab, num_tokenizer_ids=None, name="fake"):
    return ModelDrafter(
        model, target_vocab_size=vocab, num_tokenizer_ids=num_tokenizer_ids or vocab, name=name
    )


def events_of(engine, prompt, drafter, **cfg):
    events = list(engine.generate(prompt, drafter, GenerationConfig(**cfg)))
    assert isinstance(events[-1], DoneEvent)
    return events


def naive_greedy_fn(fn, prompt, n, eos=()):
    ids = list(prompt)
    out = []
    for _ in range(n):
        t = int(torch.argmax(fn(ids)))
        ids.append(t)
        out.append(t)
        if t in eos:
            break
    return out


# ---------------------------------------------------------------------------------------------
# First-principles distributions (float64, independent of specchat.sampling)
# ---------------------------------------------------------------------------------------------
def ref_warp(logits, temperature, top_k=0, top_p=1.0):
    z = logits.to(torch.float64).clone()
    v = z.shape[-1]
    if temperature == 0:
        out = torch.zeros(v, dtype=torch.float64)
        out[int(torch.argmax(z))] = 1.0
        return out
    z = z / temperature
    if 0 < top_k < v:
        kth = torch.sort(z, descending=True).values[top_k - 1]
        z[z < kth] = -math.inf
    if top_p < 1.0:
        p = torch.softmax(z, -1)
        order = torch.argsort(p, descending=True).tolist()
        keep, mass = [], 0.0
        for i in order:
            keep.append(i)
            mass += float(p[i])
            if mass >= top_p:
                break
        mask = torch.full((v,), -math.inf, dtype=torch.float64)
        mask[keep] = 0.0
        z = z + mask
    return torch.softmax(z, -1)


def exact_sequences(fn, prompt, length, *, temperature, top_k=0, top_p=1.0, eos=()):
    """{reply tuple: probability} for replies of ``length`` tokens (shorter when ending in EOS)."""
    out: dict[tuple[int, ...], float] = {}

    def rec(ids, reply, prob):
        if len(reply) == length or (reply and reply[-1] in eos):
            out[tuple(reply)] = out.get(tuple(reply), 0.0) + prob
            return
        p = ref_warp(fn(ids), temperature, top_k, top_p)
        for t in torch.nonzero(p).flatten().tolist():
            rec(ids + [t], reply + [t], prob * float(p[t]))

    rec(list(prompt), [], 1.0)
    return out


def assert_matches(counts: Counter, exact: dict, n: int, alpha: float = 1e-4):
    unexpected = {s: c for s, c in counts.items() if exact.get(s, 0.0) <= 0.0}
    assert not unexpected, f"replies with target probability 0 were emitted: {unexpected}"
    total = sum(exact.values())
    big, small_obs, small_exp = [], 0, 0.0
    for s, p in exact.items():
        e = p / total * n
        if e >= 5:
            big.append((counts.get(s, 0), e))
        else:
            small_obs += counts.get(s, 0)
            small_exp += e
    obs = [o for o, _ in big] + ([small_obs] if small_exp > 0 else [])
    exp = [e for _, e in big] + ([small_exp] if small_exp > 0 else [])
    exp = [e * sum(obs) / sum(exp) for e in exp]
    pvalue = chisquare(obs, exp).pvalue
    assert pvalue > alpha, f"chi-square p={pvalue:.2e} over {len(obs)} cells"


# ---------------------------------------------------------------------------------------------
# Custom drafters
# ---------------------------------------------------------------------------------------------
class FixedQDrafter:
    """Draws each draft from a fixed q (any support), a random count 0..max_tokens when ``ragged``."""

    name = "fixed-q"

    def __init__(self, q, *, ragged=False, report=None):
        self.q = torch.tensor(q, dtype=torch.float32)
        self.ragged = ragged
        self.report = report  # the draft_probs row reported to the engine (None = the true q)

    def begin(self, prompt_ids):
        pass

    def propose(self, ids, max_tokens, config, generator):
        n = max_tokens
        if self.ragged:
            n = int(torch.randint(0, max_tokens + 1, (1,), generator=generator))
        tokens = [int(torch.multinomial(self.q, 1, generator=generator)) for _ in range(n)]
        row = self.q if self.report is None else torch.tensor(self.report, dtype=torch.float32)
        probs = row.expand(n, -1).clone() if n else torch.empty(0, len(self.q))
        return Draft(torch.tensor(tokens, dtype=torch.long), probs, 0)

    def rollback(self, num_valid):
        pass

    def end(self):
        pass


class ScriptDrafter:
    """Deterministic drafts read from a script by reply position (q one-hot)."""

    name = "script"

    def __init__(self, script, prompt_len, *, n=None):
        self.script, self.prompt_len, self.n = script, prompt_len, n
        self.requests: list[tuple[int, int]] = []  # (reply length so far, max_tokens)

    def begin(self, prompt_ids):
        pass

    def propose(self, ids, max_tokens, config, generator):
        done = len(ids) - self.prompt_len
        self.requests.append((done, max_tokens))
        k = max_tokens if self.n is None else min(self.n, max_tokens)
        toks = [self.script[i] if i < len(self.script) else 0 for i in range(done, done + k)]
        return Draft(torch.tensor(toks, dtype=torch.long), None, 0)

    def rollback(self, num_valid):
        pass

    def end(self):
        pass


class RecordingDrafter(ModelDrafter):
    """A ModelDrafter that records its cache contents at each propose/rollback."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[tuple] = []
        self.ended = 0

    def propose(self, ids, max_tokens, config, generator):
        self.log.append(("propose", list(ids), cache_tokens(self.cache), max_tokens))
        draft = super().propose(ids, max_tokens, config, generator)
        self.log.append(("drafted", draft.token_ids.tolist(), draft.draft_probs, list(ids)))
        return draft

    def rollback(self, num_valid):
        super().rollback(num_valid)
        self.log.append(("rollback", num_valid, cache_tokens(self.cache)))

    def end(self):
        self.ended += 1
        super().end()


# =============================================================================================
# 1. Bookkeeping: both caches hold exactly the committed tokens after every round
# =============================================================================================
V = 6


def check_bookkeeping(target: FakeLM, drafter: RecordingDrafter | None, prompt, done: DoneEvent):
    committed = list(prompt) + list(done.token_ids)
    # target: the prefill, then one verify per round whose cache is committed[:len-1] and whose
    # first input is the last committed token
    calls = target.calls
    assert calls[0] == ((), tuple(prompt[:-1]))
    for cached, new in calls[1:]:
        seq = list(cached) + [new[0]]
        assert seq == committed[: len(seq)], "target cache holds tokens that were not committed"
    if drafter is None:
        return
    for entry in drafter.log:
        if entry[0] == "propose":
            _, ids, cache, _ = entry
            assert ids == committed[: len(ids)]
            assert cache == ids[: len(cache)], "drafter cache is not a prefix of the committed ids"
            assert len(ids) - 2 <= len(cache) <= len(ids) - 1
        elif entry[0] == "rollback":
            _, num_valid, cache = entry
            assert len(cache) <= num_valid
            assert cache == committed[: len(cache)]


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_exactly_the_committed_tokens(gamma, temperature):
    fn_t = hashed_logits(V, seed=1, scale=2.0)
    target = FakeLM(V, fn_t)
    dmodel = FakeLM(V, hashed_logits(V, seed=2, scale=2.0))
    drafter = RecordingDrafter(dmodel, target_vocab_size=V, num_tokenizer_ids=V, name="rec")
    engine = SpeculativeEngine(target, None)
    prompt = [1, 2, 3, 4, 5]
    for seed in range(6):
        target.calls.clear()
        drafter.log.clear()
        events = events_of(
            engine, prompt, drafter, num_speculative_tokens=gamma, temperature=temperature, seed=seed, max_new_tokens=25
        )
        done = events[-1]
        assert len(done.token_ids) == 25
        check_bookkeeping(target, drafter, prompt, done)
        # the drafter is exactly one behind after a fully accepted round, else fully caught up
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        proposes = [e for e in drafter.log if e[0] == "propose"]
        for r, nxt in zip(rounds, proposes[1:]):
            _, ids, cache, _ = nxt
            behind = len(ids) - len(cache)
            assert behind == (2 if r.num_accepted == r.num_drafted else 1), (r, behind)


def test_self_drafter_full_acceptance_every_round():
    """Drafting with the target itself at T=1: q = p exactly, every draft accepted, bonus each round."""
    fn = hashed_logits(V, seed=3, scale=2.0)
    target = FakeLM(V, fn)
    drafter = RecordingDrafter(FakeLM(V, fn), target_vocab_size=V, num_tokenizer_ids=V, name="self")
    engine = SpeculativeEngine(target, None)
    events = events_of(engine, [0, 1], drafter, num_speculative_tokens=4, temperature=1.0, seed=0, max_new_tokens=23)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert [r.num_committed for r in rounds] == [5, 5, 5, 5, 3]
    assert all(r.num_accepted == r.num_drafted for r in rounds)
    check_bookkeeping(target, drafter, [0, 1], events[-1])


@pytest.mark.parametrize(
    "temperature, top_k, top_p, rows, num_ids",
    [
        (1.0, 0, 1.0, V, V),
        (0.7, 3, 1.0, V + 3, V - 1),
        (1.3, 0, 0.6, V - 2, V - 2),
        (0.9, 2, 0.9, V, V),
        (0.0, 0, 1.0, V + 3, V - 1),
    ],
)
def test_q_is_the_warped_drafter_distribution_of_the_same_prefix(temperature, top_k, top_p, rows, num_ids):
    """p/q consistency: each draft's q is the drafter's own distribution on ids + earlier drafts,
    after the same temperature / top-k / top-p, padded or cut to the target's vocab and zero on
    ids that are not tokenizer ids; greedy drafts are the argmax with q one-hot (None)."""
    fn_d = hashed_logits(rows, seed=31, scale=3.0)
    drafter = RecordingDrafter(FakeLM(rows, fn_d), target_vocab_size=V, num_tokenizer_ids=num_ids, name="rec")
    engine = SpeculativeEngine(FakeLM(V, hashed_logits(V, seed=30, scale=3.0)), None)
    for seed in range(4):
        drafter.log.clear()
        events_of(engine, [1, 4, 2], drafter, num_speculative_tokens=4, temperature=temperature, top_k=top_k,
                  top_p=top_p, seed=seed, max_new_tokens=16)
        for entry in drafter.log:
            if entry[0] != "drafted":
                continue
            _, tokens, probs, ids = entry
            for i, tok in enumerate(tokens):
                raw = torch.full((V,), -math.inf)
                logits = fn_d(ids + tokens[:i])
                m = min(rows, V)
                raw[:m] = logits[:m]
                raw[num_ids:] = -math.inf
                q = ref_warp(raw, temperature, top_k, top_p)
                if temperature == 0.0:
                    assert probs is None and tok == int(torch.argmax(q))
                else:
                    assert probs[i].tolist() == pytest.approx(q.tolist(), abs=1e-5)
                    assert q[tok] > 0


# =============================================================================================
# 2. Verify alignment: every committed token's reported p is p(token | exact prefix)
# =============================================================================================
@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.6, 3, 1.0), (1.0, 0, 0.7), (0.0, 0, 1.0)])
def test_reported_target_prob_is_p_of_the_exact_prefix(temperature, top_k, top_p):
    fn_t = hashed_logits(V, seed=4, scale=3.0)
    target = FakeLM(V, fn_t)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=5, scale=3.0)), V)
    engine = SpeculativeEngine(target, None)
    prompt = [2, 3]
    for seed in range(5):
        events = events_of(
            engine, prompt, drafter, num_speculative_tokens=3, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, max_new_tokens=20,
        )
        ids = list(prompt)
        pending = []
        for e in events:
            if isinstance(e, TokenEvent):
                p = ref_warp(fn_t(ids), temperature, top_k, top_p)
                assert e.target_prob == pytest.approx(float(p[e.token_id]), abs=1e-5)
                assert e.target_prob > 0  # p(x) = 0 is never emitted
                if e.kind is TokenKind.RESAMPLED:
                    assert e.rejected_target_prob == pytest.approx(float(p[e.rejected_token_id]), abs=1e-5)
                ids.append(e.token_id)
                pending.append(e)
            elif isinstance(e, RoundEvent):
                # 1..γ+1 tokens a round, accepted = leading run, positions 0..n-1
                assert 1 <= e.num_committed <= e.num_drafted + 1 <= 4
                assert [t.position for t in pending] == list(range(len(pending)))
                kinds = [t.kind for t in pending]
                assert kinds == [TokenKind.ACCEPTED] * e.num_accepted + [
                    TokenKind.BONUS if e.num_accepted == e.num_drafted else TokenKind.RESAMPLED
                ]
                assert all(e.accepted_mask[: e.num_accepted]) and (
                    e.num_accepted == e.num_drafted or not e.accepted_mask[e.num_accepted]
                )
                pending = []


# =============================================================================================
# 3/4. Exact output distribution, by enumeration and chi-square, across drafters and settings
# =============================================================================================
def run_many(engine, prompt, drafter, n, **cfg):
    counts: Counter = Counter()
    for seed in range(n):
        done = list(engine.generate(prompt, drafter, GenerationConfig(seed=seed, **cfg)))[-1]
        counts[tuple(done.token_ids)] += 1
    return counts


def make_drafter(kind):
    if kind == "other":
        return model_drafter(FakeLM(V, hashed_logits(V, seed=12, scale=2.5)), V)
    if kind == "self":
        return model_drafter(FakeLM(V, hashed_logits(V, seed=11, scale=2.0)), V)
    if kind == "sharp":  # confident and mostly wrong
        return model_drafter(FakeLM(V, hashed_logits(V, seed=13, scale=12.0)), V)
    if kind == "smaller_vocab":  # 4 rows for a 6-token target: q = 0 on ids 4, 5
        return model_drafter(FakeLM(4, hashed_logits(4, seed=14, scale=2.0)), V)
    if kind == "padded_vocab":  # 9 rows; only ids < 5 are tokenizer ids
        return model_drafter(FakeLM(9, hashed_logits(9, seed=15, scale=2.0)), V, num_tokenizer_ids=5)
    if kind == "ngram":
        return NgramDrafter(max_ngram=2)
    if kind == "fixed_q_bad":  # mass on ids the target rarely/never keeps
        return FixedQDrafter([0.02, 0.02, 0.02, 0.04, 0.45, 0.45])
    if kind == "ragged":  # returns 0..max_tokens drafts
        return FixedQDrafter([0.3, 0.1, 0.2, 0.1, 0.2, 0.1], ragged=True)
    raise ValueError(kind)


DIST_CASES = [
    # drafter, gamma, temperature, top_k, top_p, max_new, eos
    ("other", 2, 1.0, 0, 1.0, 3, ()),
    ("self", 3, 1.0, 0, 1.0, 3, ()),
    ("sharp", 3, 0.8, 0, 1.0, 3, ()),
    ("smaller_vocab", 2, 1.0, 0, 1.0, 3, ()),
    ("padded_vocab", 3, 1.2, 0, 1.0, 3, ()),
    ("ngram", 3, 1.0, 0, 1.0, 3, ()),
    ("fixed_q_bad", 4, 1.0, 3, 1.0, 3, ()),
    ("ragged", 3, 0.9, 0, 0.8, 3, ()),
    ("other", 4, 1.0, 2, 1.0, 3, (0,)),  # EOS inside multi-token commits
    ("sharp", 6, 1.0, 0, 0.9, 2, (5,)),  # γ larger than the budget
    ("self", 5, 0.5, 4, 0.95, 4, (1,)),
]


@pytest.mark.parametrize("kind, gamma, temperature, top_k, top_p, max_new, eos", DIST_CASES)
def test_reply_distribution_is_exactly_the_targets(kind, gamma, temperature, top_k, top_p, max_new, eos):
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    target = FakeLM(V, fn_t)
    engine = SpeculativeEngine(target, None, eos_token_ids=eos)
    prompt = [3, 1, 4, 1, 5, 3, 1, 4] if kind == "ngram" else [3, 1]
    exact = exact_sequences(fn_t, prompt, max_new, temperature=temperature, top_k=top_k, top_p=top_p, eos=eos)
    n = 3000
    counts = run_many(
        engine, prompt, make_drafter(kind), n,
        num_speculative_tokens=gamma, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new,
    )
    assert_matches(counts, exact, n)


def test_target_only_distribution_is_exact():
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    exact = exact_sequences(fn_t, [3, 1], 3, temperature=1.0)
    assert_matches(run_many(engine, [3, 1], None, 3000, temperature=1.0, max_new_tokens=3), exact, 3000)


def test_tiny_transformer_distribution_with_sibling_three_tokens():
    """Real (tiny) transformers and ModelDrafter with real KV caches: joint of 3 tokens, γ=3."""
    vocab = 5
    tgt = tiny_model(vocab_size=vocab, seed=21, init_std=0.2)
    drf = tiny_model(vocab_size=vocab + 2, seed=22, init_std=0.2, family="qwen2")

    @torch.inference_mode()
    def fn(ids):
        return tgt(torch.tensor([ids])).logits[0, -1]

    prompt = [1, 2]
    exact = exact_sequences(fn, prompt, 3, temperature=1.0)
    engine = SpeculativeEngine(tgt, None)
    drafter = ModelDrafter(drf, target_vocab_size=vocab, num_tokenizer_ids=vocab, name="sib")
    n = 1200
    counts = run_many(engine, prompt, drafter, n, num_speculative_tokens=3, temperature=1.0, max_new_tokens=3)
    assert_matches(counts, exact, n)


# =============================================================================================
# 4. Accept-rule numerics (verify_draft directly)
# =============================================================================================
def test_one_hot_none_equals_explicit_one_hot():
    """q=None (deterministic drafts) must behave exactly like an explicit one-hot q."""
    p = torch.softmax(torch.randn(4, 7, generator=torch.Generator().manual_seed(0)), -1)
    drafts = torch.tensor([2, 5, 1])
    one_hot = torch.zeros(3, 7)
    one_hot[torch.arange(3), drafts] = 1.0
    for seed in range(200):
        a = verify_draft(drafts, None, p, torch.Generator().manual_seed(seed))
        b = verify_draft(drafts, one_hot, p, torch.Generator().manual_seed(seed))
        assert a == b


def test_drafted_token_with_q_zero_and_p_zero():
    """A draft the drafter claims it could not draw (q=0): no division; p=0 still never accepted."""
    p = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])
    for seed in range(50):
        res = verify_draft(torch.tensor([0]), torch.tensor([[0.0, 1.0, 0.0]]), p, torch.Generator().manual_seed(seed))
        assert res.num_accepted == 0 and res.next_token_id == 2  # residual = max(0, p - q) = [0, 0, .5]
    p = torch.tensor([[0.4, 0.6, 0.0], [0.2, 0.3, 0.5]])
    for seed in range(50):
        res = verify_draft(torch.tensor([0]), torch.tensor([[0.0, 1.0, 0.0]]), p, torch.Generator().manual_seed(seed))
        assert res.num_accepted == 1  # u * 0 < 0.4 always


def test_residual_without_mass_falls_back_to_p_not_nan():
    p = torch.tensor([0.1, 0.2, 0.7])
    q = torch.tensor([0.1, 0.2, 0.7]) + torch.tensor([1e-8, -1e-8, 0.0])
    r = residual_probs(p, q, 2)
    assert torch.isfinite(r).all() and torch.allclose(r, p)


def test_unnormalised_draft_probs_do_not_crash_and_respect_target_support():
    """A buggy drafter reporting q rows that do not sum to 1: the engine must still never emit p=0."""
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = FixedQDrafter([0.2] * 6, report=[0.9, 0.0, 0.3, 0.0, 2.0, 0.1])
    for seed in range(30):
        events = events_of(engine, [3, 1], drafter, num_speculative_tokens=3, temperature=1.0, top_k=2, seed=seed,
                           max_new_tokens=8)
        assert all(e.target_prob > 0 for e in events if isinstance(e, TokenEvent))


# =============================================================================================
# 5. Termination inside a multi-token commit; text and streams
# =============================================================================================
TOK = byte_tokenizer()


def scripted_engine(reply: bytes, prompt: bytes, *, eos=(EOS_BYTE,), after=EOS_BYTE, context_length=None):
    script = list(reply)
    fn = script_logits(257, script, len(prompt), after)
    target = FakeLM(257, fn, max_positions=context_length or 4096)
    return SpeculativeEngine(target, TOK, eos_token_ids=eos, context_length=context_length), target, script


def stream_text(events):
    """What a streaming consumer shows: every TokenEvent.text, then DoneEvent.final_text."""
    done = [e for e in events if isinstance(e, DoneEvent)]
    tail = done[0].final_text if done else ""
    return "".join(e.text for e in events if isinstance(e, TokenEvent)) + tail


REPLY = "Hello, wörld! <END> tail € END 🙂 more text".encode()
PROMPT = b"prompt with <END> and END inside: "


@pytest.mark.parametrize(
    "stops, expected",
    [
        (("<END>",), "Hello, wörld! "),
        (("ld! <",), "Hello, wör"),  # spans many tokens
        (("<EN", "<END>"), "Hello, wörld! "),  # one stop a prefix of another
        (("<END>", "<EN"), "Hello, wörld! "),
        (("ö",), "Hello, w"),  # a 2-byte character split across two tokens
        (("€",), "Hello, wörld! <END> tail "),  # 3 bytes
        (("🙂",), "Hello, wörld! <END> tail € END "),  # 4 bytes
        (("wörld! <END> tail € END 🙂 more textX",), "Hello, wörld! <END> tail € END 🙂 more text"),
        (("xyz", "! <"), "Hello, wörld"),
        (("llo, wörld! <END> tail € X", "o, w"), "Hell"),  # a later-starting stop completes first
        (("H",), ""),  # stop at the very first token
        (("e text",), "Hello, wörld! <END> tail € END 🙂 mor"),  # completed by the last budgeted token
    ],
)
@pytest.mark.parametrize("gamma", [1, 4, 9])
def test_stop_strings_inside_commits(stops, expected, gamma):
    engine, target, script = scripted_engine(REPLY, PROMPT)
    # a drafter that is right except at every 5th position: multi-token commits with rejections
    wrong = [t if i % 5 != 4 else (t + 1) % 256 for i, t in enumerate(script)]
    drafter = ScriptDrafter(wrong, len(PROMPT))
    events = events_of(engine, list(PROMPT), drafter, num_speculative_tokens=gamma, max_new_tokens=len(script),
                       stop_strings=stops)
    done = events[-1]
    assert done.text == expected
    assert stream_text(events) == expected
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert [e.token_id for e in tokens] == list(done.token_ids) == script[: len(done.token_ids)]
    if done.stop_reason is StopReason.STOP_STRING:
        # the reply ends with the token that completed the first stop string, nothing later
        full = TOK.decode(done.token_ids)
        shorter = TOK.decode(done.token_ids[:-1])
        assert any(s in full for s in stops) and not any(s in shorter for s in stops)
    else:
        assert done.stop_reason is StopReason.MAX_NEW_TOKENS and done.text == REPLY.decode()


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_eos_inside_commit_ends_reply_and_drafted_eos_is_not_a_stop(gamma):
    reply = b"abc def ghi"
    script = list(reply) + [EOS_BYTE] + list(b"after eos")
    fn = script_logits(257, script, len(PROMPT), EOS_BYTE)
    engine = SpeculativeEngine(FakeLM(257, fn), TOK, eos_token_ids=[EOS_BYTE])
    # the drafter drafts past EOS correctly: the reply must end at EOS
    events = events_of(engine, list(PROMPT), ScriptDrafter(script, len(PROMPT)), num_speculative_tokens=gamma,
                       max_new_tokens=40)
    done = events[-1]
    assert done.stop_reason is StopReason.EOS
    assert list(done.token_ids) == list(reply) + [EOS_BYTE]
    assert done.text == stream_text(events) == "abc def ghi"
    # a drafter that drafts EOS where the target says otherwise: rejected, the reply goes on
    bad = [EOS_BYTE if i in (2, 5) else t for i, t in enumerate(script)]
    events = events_of(engine, list(PROMPT), ScriptDrafter(bad, len(PROMPT)), num_speculative_tokens=gamma,
                       max_new_tokens=40)
    assert list(events[-1].token_ids) == list(reply) + [EOS_BYTE]
    assert events[-1].stop_reason is StopReason.EOS


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 9, 10, 11])
@pytest.mark.parametrize("gamma", [1, 4, 9])
def test_budget_never_exceeded_and_drafts_fit_the_budget(budget, gamma):
    engine, target, script = scripted_engine(REPLY, PROMPT)
    drafter = ScriptDrafter(script, len(PROMPT))
    events = events_of(engine, list(PROMPT), drafter, num_speculative_tokens=gamma, max_new_tokens=budget)
    done = events[-1]
    assert list(done.token_ids) == script[:budget]
    assert done.stop_reason is StopReason.MAX_NEW_TOKENS
    assert done.text == stream_text(events) == TOK.decode(script[:budget])  # incomplete char flushed as U+FFFD
    for produced, asked in drafter.requests:
        assert 1 <= asked <= min(gamma, budget - produced - 1)


def test_cancel_keeps_text_held_for_a_possible_stop_string():
    """Cancelled reply: no stop string was found, so the text is everything committed.

    The reply is "abcab..." and the stop string "abX" never completes; after "ab" the
    detokenizer holds "ab" back (it could be the start of "abX"). Cancelling then must not
    silently drop those committed characters from the final text.
    """
    engine, target, script = scripted_engine(b"abcabcabcab", b"> ")
    cancel = threading.Event()
    events = []
    for e in engine.generate(list(b"> "), None, GenerationConfig(max_new_tokens=20, stop_strings=("abX",)), cancel):
        events.append(e)
        if isinstance(e, TokenEvent) and len([x for x in events if isinstance(x, TokenEvent)]) == 5:
            cancel.set()
    done = events[-1]
    assert done.stop_reason is StopReason.CANCELLED
    assert list(done.token_ids) == list(b"abcab")
    assert done.text == stream_text(events)
    assert done.text == "abcab"


def test_stop_string_in_prompt_does_not_stop_and_empty_stops_ignored():
    engine, target, script = scripted_engine(b"plain reply", b"STOP here STOP")
    events = events_of(engine, list(b"STOP here STOP"), None, max_new_tokens=11, stop_strings=("STOP", ""))
    assert events[-1].text == "plain reply" and events[-1].stop_reason is StopReason.MAX_NEW_TOKENS


# =============================================================================================
# 6. Vocabulary alignment
# =============================================================================================
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafter_never_proposes_padding_ids(temperature):
    """A drafter whose padding rows (>= len(tokenizer)) have the highest logits never drafts them."""
    num_ids = 5

    def fn(prefix):
        out = hashed_logits(9, seed=3, scale=1.0)(prefix)
        out[num_ids:] = 50.0
        return out

    drafter = RecordingDrafter(FakeLM(9, fn), target_vocab_size=V, num_tokenizer_ids=num_ids, name="pad")
    engine = SpeculativeEngine(FakeLM(V, hashed_logits(V, seed=1, scale=2.0)), None)
    for seed in range(5):
        drafter.log.clear()
        events_of(engine, [1, 2], drafter, num_speculative_tokens=4, temperature=temperature, seed=seed,
                  max_new_tokens=20)
        drafted = [t for e in drafter.log if e[0] == "drafted" for t in e[1]]
        assert drafted and max(drafted) < num_ids


def test_greedy_identity_with_drafter_vocab_smaller_and_larger():
    fn_t = hashed_logits(V, seed=6, scale=4.0)
    ref = naive_greedy_fn(fn_t, [1, 2], 30)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    for rows in (3, 6, 11):
        drafter = model_drafter(FakeLM(rows, hashed_logits(rows, seed=7, scale=4.0)), V, num_tokenizer_ids=min(rows, V))
        for gamma in (1, 4):
            done = events_of(engine, [1, 2], drafter, num_speculative_tokens=gamma, max_new_tokens=30)[-1]
            assert list(done.token_ids) == ref


# =============================================================================================
# 7. Context bounds
# =============================================================================================
@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompts_ending_0_to_gamma_plus_1_before_the_context_limit(gamma, temperature):
    fn_t = hashed_logits(V, seed=8, scale=4.0)
    prompt = [1, 2, 3, 4, 5, 0, 1]
    for slack in range(0, gamma + 3):
        ctx = len(prompt) + slack
        target = FakeLM(V, fn_t, max_positions=ctx)
        engine = SpeculativeEngine(target, None)
        dmodel = FakeLM(V, fn_t, max_positions=ctx)  # the drafter = the target: long commits
        drafter = model_drafter(dmodel, V)
        cfg = dict(num_speculative_tokens=gamma, temperature=temperature, seed=1, max_new_tokens=50)
        if slack == 0:
            with pytest.raises(ValueError):
                list(engine.generate(prompt, drafter, GenerationConfig(**cfg)))
            continue
        done = events_of(engine, prompt, drafter, **cfg)[-1]
        assert len(done.token_ids) == slack and done.stop_reason is StopReason.CONTEXT_FULL
        if temperature == 0.0:
            assert list(done.token_ids) == naive_greedy_fn(fn_t, prompt, slack)


def test_one_token_prompt_and_empty_prompt():
    fn_t = hashed_logits(V, seed=8, scale=4.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=9, scale=4.0)), V)
    done = events_of(engine, [4], drafter, num_speculative_tokens=3, max_new_tokens=12)[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, [4], 12)
    with pytest.raises(ValueError, match="empty"):
        list(engine.generate([], drafter, GenerationConfig()))


# =============================================================================================
# 8. Numerical (non-)invariance on real tiny transformers
# =============================================================================================
@torch.inference_mode()
def naive_greedy(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_fp32_greedy_identity_tiny_transformers_vs_naive_loop(family):
    vocab = 257
    tgt = tiny_model(vocab_size=vocab, seed=30, family=family)
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    ref = naive_greedy(tgt, prompt, 40)
    engine = SpeculativeEngine(tgt, TOK)
    drafters = [
        ModelDrafter(tiny_model(vocab_size=300, seed=31), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="s"),
        ModelDrafter(tgt, target_vocab_size=vocab, num_tokenizer_ids=vocab, name="self"),
        NgramDrafter(),
    ]
    for drafter in drafters:
        for gamma in (2, 7):
            done = events_of(engine, prompt, drafter, num_speculative_tokens=gamma, max_new_tokens=40)[-1]
            assert list(done.token_ids) == ref


@pytest.mark.parametrize("seed", [40, 41, 42])
def test_bf16_greedy_divergence_only_at_near_ties(seed):
    """bf16: a batched verify pass may round differently from one-token steps; the greedy
    reply may then differ from target-only decoding, but only where the top two logits tie
    to within bf16 resolution. (On CPU no divergence occurred for these seeds.)"""
    vocab = 257
    tgt = tiny_model(vocab_size=vocab, seed=seed, dtype=torch.bfloat16, init_std=0.05)
    prompt = list(b"the quick brown fox jumps over the lazy dog; the quick brown fox ")
    engine = SpeculativeEngine(tgt, None)
    base = list(events_of(engine, prompt, None, max_new_tokens=40)[-1].token_ids)
    drafter = ModelDrafter(tgt, target_vocab_size=vocab, num_tokenizer_ids=vocab, name="self")
    spec = list(events_of(engine, prompt, drafter, num_speculative_tokens=6, max_new_tokens=40)[-1].token_ids)
    i = next((k for k, (a, b) in enumerate(zip(base, spec)) if a != b), None)
    if i is None:
        return
    with torch.inference_mode():
        logits = tgt(torch.tensor([prompt + base[:i]])).logits[0, -1].float()
    top2 = torch.topk(logits, 2).values
    # a bf16 logit of magnitude m is exact to about m * 2^-8: a divergence needs a near-tie
    assert float(top2[0] - top2[1]) <= 4 * float(top2[0].abs()) * 2**-8 + 1e-3


def test_target_committing_an_id_the_drafter_cannot_embed():
    """Qwen2.5-style padding: target 300 rows, tokenizer 257 ids, drafter 270 rows.

    The target may commit any of its 300 ids (its distribution is preserved exactly, padding
    rows included). When it commits one the drafter's embedding lacks (here 280), speculative
    decoding must still give the target-only reply, not an IndexError inside the drafter.
    """
    script = [65, 66, 67, 280, 68, 69, 70, 71, 72, 73]
    prompt = [1, 2, 3]
    fn = script_logits(300, script, len(prompt), 74)
    engine = SpeculativeEngine(FakeLM(300, fn), None)
    ref = events_of(engine, prompt, None, max_new_tokens=10)[-1].token_ids
    assert list(ref) == script
    drafter = ModelDrafter(tiny_model(vocab_size=270, seed=50), target_vocab_size=300, num_tokenizer_ids=257, name="s")
    done = events_of(engine, prompt, drafter, num_speculative_tokens=3, max_new_tokens=10)[-1]
    assert done.token_ids == ref


# =============================================================================================
# 9. Resource lifecycle
# =============================================================================================
def test_close_mid_stream_and_drop_release_caches_and_engine_stays_usable():
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    target = FakeLM(V, fn_t)
    engine = SpeculativeEngine(target, None)
    drafter = RecordingDrafter(FakeLM(V, hashed_logits(V, seed=9, scale=3.0)), target_vocab_size=V,
                               num_tokenizer_ids=V, name="rec")
    cfg = GenerationConfig(num_speculative_tokens=3, temperature=1.0, seed=5, max_new_tokens=30)
    ref = list(engine.generate([1, 2, 3], drafter, cfg))[-1].token_ids
    ended = drafter.ended
    g = engine.generate([1, 2, 3], drafter, cfg)
    for _ in range(5):
        next(g)
    assert engine.target_cache is not None and drafter.cache is not None
    g.close()
    assert engine.target_cache is None and drafter.cache is None and drafter.ended == ended + 1
    g = engine.generate([1, 2, 3], drafter, cfg)
    next(g)
    del g  # dropped, not closed
    gc.collect()
    assert engine.target_cache is None and drafter.cache is None
    assert list(engine.generate([1, 2, 3], drafter, cfg))[-1].token_ids == ref


class ExplodingDrafter(ModelDrafter):
    def __init__(self, *a, explode_at=3, **k):
        super().__init__(*a, **k)
        self.explode_at, self.calls, self.ended = explode_at, 0, 0

    def propose(self, ids, max_tokens, config, generator):
        self.calls += 1
        if self.calls == self.explode_at:
            raise RuntimeError("drafter exploded")
        return super().propose(ids, max_tokens, config, generator)

    def end(self):
        self.ended += 1
        super().end()


def test_drafter_exception_mid_generation_leaves_engine_usable():
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = ExplodingDrafter(FakeLM(V, fn_t), target_vocab_size=V, num_tokenizer_ids=V, name="boom")
    with pytest.raises(RuntimeError, match="exploded"):
        list(engine.generate([1, 2], drafter, GenerationConfig(num_speculative_tokens=2, max_new_tokens=30)))
    assert engine.target_cache is None and drafter.cache is None and drafter.ended == 1
    done = events_of(engine, [1, 2], drafter, num_speculative_tokens=2, max_new_tokens=30)[-1]
    assert list(done.token_ids) == naive_greedy_fn(fn_t, [1, 2], 30)


def test_generator_stepped_from_several_threads_runs_without_autograd():
    """Gradio (and any thread-pool consumer) calls next() on a sync generator from worker threads.

    torch.inference_mode() is thread-local: entered inside the generator on the first step's
    thread, it does not apply when a later step runs on another thread. Every target/drafter
    forward must still run without building an autograd graph.
    """
    tgt = tiny_model(vocab_size=257, seed=0)
    drf = tiny_model(vocab_size=257, seed=3)
    grads: list[bool] = []
    for m in (tgt, drf):
        m.register_forward_hook(lambda mod, args, kwargs, out: grads.append(out.logits.requires_grad), with_kwargs=True)
    engine = SpeculativeEngine(tgt, TOK)
    drafter = ModelDrafter(drf, target_vocab_size=257, num_tokenizer_ids=257, name="d")
    g = engine.generate(list(b"hello world"), drafter, GenerationConfig(num_speculative_tokens=2, max_new_tokens=8))
    box: list = []

    def step():
        try:
            box.append(next(g))
        except StopIteration:
            box.append(None)

    while not box or box[-1] is not None:
        th = threading.Thread(target=step)
        th.start()
        th.join()
    assert len(grads) > 4
    assert not any(grads), f"{sum(grads)} of {len(grads)} forwards built an autograd graph"


def test_consumer_does_not_run_in_inference_mode_between_events():
    engine = SpeculativeEngine(FakeLM(V, hashed_logits(V, seed=1, scale=1.0)), None)
    assert not torch.is_inference_mode_enabled()
    seen = []
    for _ in engine.generate([1, 2], None, GenerationConfig(max_new_tokens=3)):
        seen.append(torch.is_inference_mode_enabled())
    assert not any(seen), "the engine's inference_mode leaks into the caller while it is suspended"


def test_late_cleanup_of_an_abandoned_generator_does_not_break_the_next_one():
    """An abandoned generator is finalised whenever the GC gets to it (e.g. inside a cycle).

    Its cleanup must not clear the state of a newer generation already running on the engine.
    """
    fn_t = hashed_logits(V, seed=10, scale=3.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = model_drafter(FakeLM(V, hashed_logits(V, seed=9, scale=3.0)), V)
    cfg = GenerationConfig(num_speculative_tokens=2, max_new_tokens=20)
    ref = naive_greedy_fn(fn_t, [1, 2], 20)
    old = engine.generate([5, 5, 5], drafter, cfg)
    next(old)  # abandoned mid-stream, finalised later
    new = engine.generate([1, 2], drafter, cfg)
    events = [next(new) for _ in range(3)]
    old.close()  # what the GC does to the abandoned generator
    events += list(new)
    assert list(events[-1].token_ids) == ref


# =============================================================================================
# 1b. Cache that cannot be cut back: refused with CacheRollbackError, left untouched
# =============================================================================================
def sliding_qwen(window=8, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, use_sliding_window=True, sliding_window=window,
        max_window_layers=1, initializer_range=0.3, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    return Qwen2ForCausalLM(cfg).eval()


def test_cut_cache_within_the_sliding_window_is_exact():
    model = sliding_qwen()
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.arange(6)[None], cache=cache, use_cache=True)
        cut_cache(cache, 4)
        assert [layer.get_seq_length() for layer in cache.layers] == [4, 4]
        with pytest.raises(CacheRollbackError):
            cut_cache(cache, 5)
        with pytest.raises(CacheRollbackError):
            cut_cache(cache, -1)


def test_cut_cache_refuses_a_sliding_layer_past_its_window_and_leaves_it_untouched():
    model = sliding_qwen(window=8)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.arange(12)[None], cache=cache, use_cache=True)
    before = [(layer.get_seq_length(), layer.keys.shape[-2]) for layer in cache.layers]
    with pytest.raises(CacheRollbackError):
        cut_cache(cache, 10)
    assert [(layer.get_seq_length(), layer.keys.shape[-2]) for layer in cache.layers] == before


def test_engine_with_sliding_window_target_is_exact_or_refuses_clearly():
    """Past the window a partial rejection needs a cut: exact output, or a CacheRollbackError."""
    model = sliding_qwen(window=8, seed=1)
    prompt = list(range(3, 15))
    ref = naive_greedy(model, prompt, 12)
    engine = SpeculativeEngine(model, None)
    drafter = ModelDrafter(sliding_qwen(window=8, seed=2), target_vocab_size=64, num_tokenizer_ids=64, name="sw")
    try:
        done = events_of(engine, prompt, drafter, num_speculative_tokens=3, max_new_tokens=12)[-1]
    except CacheRollbackError:
        return
    assert list(done.token_ids) == ref


# =============================================================================================
# Settings corner cases
# =============================================================================================
def greedy_ref_engine():
    fn_t = hashed_logits(257, seed=20, scale=8.0)
    engine = SpeculativeEngine(FakeLM(257, fn_t), TOK)
    drafter = model_drafter(FakeLM(257, hashed_logits(257, seed=21, scale=8.0)), 257)
    return engine, drafter, naive_greedy_fn(fn_t, [65, 66], 30)


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=1e-4),
        dict(temperature=1.0, top_k=1),
        dict(temperature=1.0, top_p=1e-9),
        dict(temperature=2.0, top_k=1, top_p=0.5),
    ],
)
def test_settings_that_reduce_to_greedy(settings):
    engine, drafter, ref = greedy_ref_engine()
    for seed in range(3):
        done = events_of(engine, [65, 66], drafter, num_speculative_tokens=3, seed=seed, max_new_tokens=30,
                         **settings)[-1]
        assert list(done.token_ids) == ref


@pytest.mark.parametrize("temperature", [1e-20, 1e-38, 1e-39])
def test_tiny_but_valid_temperature_does_not_crash(temperature):
    """GenerationConfig accepts any 0 < T <= 5; logits / T must not overflow into NaN."""
    engine, drafter, ref = greedy_ref_engine()
    done = events_of(engine, [65, 66], drafter, num_speculative_tokens=3, temperature=temperature, seed=0,
                     max_new_tokens=30)[-1]
    assert list(done.token_ids) == ref


def test_top_k_at_or_above_vocab_is_off_and_seeds_reproduce():
    fn_t = hashed_logits(V, seed=11, scale=2.0)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    drafter = make_drafter("other")
    outs = {}
    for top_k in (0, V, V + 1, 10_000):
        outs[top_k] = [
            events_of(engine, [3, 1], drafter, num_speculative_tokens=3, temperature=1.0, top_k=top_k, seed=s,
                      max_new_tokens=12)[-1].token_ids
            for s in range(8)
        ]
    assert outs[0] == outs[V] == outs[V + 1] == outs[10_000]
    again = [
        events_of(engine, [3, 1], drafter, num_speculative_tokens=3, temperature=1.0, seed=s,
                  max_new_tokens=12)[-1].token_ids
        for s in range(8)
    ]
    assert again == outs[0]  # same seed → same reply
    assert len(set(outs[0])) >= 6  # different seeds → different replies


def test_drafter_returning_fewer_or_zero_tokens_greedy_identity():
    fn_t = hashed_logits(V, seed=6, scale=4.0)
    ref = naive_greedy_fn(fn_t, [1, 2], 25)
    engine = SpeculativeEngine(FakeLM(V, fn_t), None)
    for n in (0, 1, 2):
        drafter = ScriptDrafter(ref, 2, n=n)
        events = events_of(engine, [1, 2], drafter, num_speculative_tokens=5, max_new_tokens=25)
        assert list(events[-1].token_ids) == ref
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert all(r.num_drafted <= n and r.num_committed == r.num_drafted + 1 for r in rounds[:-1])
