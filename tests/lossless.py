"""Shared fakes, first-principles references and drafters for the lossless test families.

Test files ``test_kind1_*`` … ``test_kind9_*`` cover the nine kinds of fault of issue 3 (one
file per kind); ``test_greedy_identity``, ``test_distribution`` and ``test_events`` cover the
three required test types across kinds. ``scripts/mutants.py`` breaks each mechanism on
purpose and shows that its family fails.

Every expectation comes from first principles: a target-only greedy loop, exact distributions
by enumeration with an independent float64 warper (:func:`ref_warp`), hand-computed numbers,
or the documented contract. Never from the engine's own output.

Most tests use :class:`FakeLM`: an HF-shaped causal LM whose next-token logits are a pure
function of the prefix it *reads back from its own KV cache*. A cache that holds a rejected
token, misses a committed one, or is misaligned therefore changes the logits, and every forward
is recorded, so the cache contents can be checked against the committed sequence after every
round. It is also ~10x faster than a tiny transformer, which makes large chi-square samples
affordable.
"""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import torch
from scipy.stats import chisquare
from tiny_models import byte_tokenizer
from transformers import LlamaConfig

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent
from specchat.drafters import Draft, Drafter, ModelDrafter, NgramDrafter
from specchat.runtimes.transformers import TransformersRuntime

EOS_BYTE = 256  # byte tokenizer: ids 0..255 are bytes, 256 is <eos>
V = 6  # vocabulary of the FakeLM tests
TOK = byte_tokenizer()
TINY_VOCAB = 257  # byte tokenizer: 256 bytes + <eos>
TINY_PROMPT = list(b"def add(a, b):\n    return a + b\n\ndef add(a, b):\n")


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
    if cache is None:
        return []
    layer = cache.layers[0]
    if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
        return []
    return [int(x) for x in layer.keys.reshape(-1).tolist()]


def model_drafter(model, vocab, num_tokenizer_ids=None, name="fake"):
    return ModelDrafter(TransformersRuntime(model), target_vocab_size=vocab, num_tokenizer_ids=num_tokenizer_ids or vocab, name=name)


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


@torch.inference_mode()
def naive_greedy(model, prompt, n, eos=()):
    """Target-only greedy from first principles: a full forward over the whole sequence per step."""
    return naive_greedy_fn(lambda ids: model(torch.tensor([ids])).logits[0, -1], prompt, n, eos)


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


def run_many(engine, prompt, drafter, n, *, stats: Counter | None = None, **cfg):
    """Replies of ``n`` generations with seeds 0…n-1: Counter {reply tuple: count}.

    ``stats``, when given, is incremented with the token kinds emitted ("accepted",
    "resampled", "bonus", "target") and "drafted" (draft tokens proposed), to show which paths ran.
    """
    counts: Counter = Counter()
    for seed in range(n):
        events = list(engine.generate(prompt, drafter, GenerationConfig(seed=seed, **cfg)))
        done = events[-1]
        counts[tuple(done.token_ids)] += 1
        if stats is not None:
            stats.update(k.value for k in done.kinds)
            stats["drafted"] += sum(e.num_drafted for e in events if isinstance(e, RoundEvent))
    return counts


def stream_text(events):
    """What a streaming consumer shows: every TokenEvent.text, then DoneEvent.final_text."""
    done = [e for e in events if isinstance(e, DoneEvent)]
    tail = done[0].final_text if done else ""
    return "".join(e.text for e in events if isinstance(e, TokenEvent)) + tail


class StatelessDrafter(Drafter):
    """Base for test drafters without a cache: begin / rollback / end do nothing (the optional
    methods of the Drafter protocol keep their defaults)."""

    name = "stateless"

    def begin(self, prompt_ids):
        pass

    def rollback(self, num_valid):
        pass

    def end(self):
        pass


class FixedQDrafter(StatelessDrafter):
    """Draws each draft from a fixed q (any support), a random count 0..max_tokens when ``ragged``."""

    name = "fixed-q"

    def __init__(self, q, *, ragged=False, report=None):
        self.q = torch.tensor(q, dtype=torch.float32)
        self.ragged = ragged
        self.report = report  # the draft_probs row reported to the engine (None = the true q)

    def propose(self, ids, max_tokens, config, generator):
        n = max_tokens
        if self.ragged:
            n = int(torch.randint(0, max_tokens + 1, (1,), generator=generator))
        tokens = [int(torch.multinomial(self.q, 1, generator=generator)) for _ in range(n)]
        row = self.q if self.report is None else torch.tensor(self.report, dtype=torch.float32)
        probs = row.expand(n, -1).clone() if n else torch.empty(0, len(self.q))
        return Draft(torch.tensor(tokens, dtype=torch.long), probs, 0)


class ScriptDrafter(StatelessDrafter):
    """Deterministic drafts read from a script by reply position (q one-hot)."""

    name = "script"

    def __init__(self, script, prompt_len, *, n=None):
        self.script, self.prompt_len, self.n = script, prompt_len, n
        self.requests: list[tuple[int, int]] = []  # (reply length so far, max_tokens)

    def propose(self, ids, max_tokens, config, generator):
        done = len(ids) - self.prompt_len
        self.requests.append((done, max_tokens))
        k = max_tokens if self.n is None else min(self.n, max_tokens)
        toks = [self.script[i] if i < len(self.script) else 0 for i in range(done, done + k)]
        return Draft(torch.tensor(toks, dtype=torch.long), None, 0)


class RecordingDrafter(ModelDrafter):
    """A ModelDrafter that records its cache contents at each propose/rollback."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[tuple] = []
        self.ended = 0

    def propose(self, ids, max_tokens, config, generator):
        self.log.append(("propose", list(ids), cache_tokens(self.runtime.cache), max_tokens))
        draft = super().propose(ids, max_tokens, config, generator)
        self.log.append(("drafted", draft.token_ids.tolist(), draft.draft_probs, list(ids)))
        return draft

    def rollback(self, num_valid):
        super().rollback(num_valid)
        self.log.append(("rollback", num_valid, cache_tokens(self.runtime.cache)))

    def end(self):
        self.ended += 1
        super().end()


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


class TinyService:
    """The slice of ChatService the audit uses, over tiny random models."""

    def __init__(self, target, drafter_model, vocab):
        self.engine = SpeculativeEngine(TransformersRuntime(target), None, eos_token_ids=[])
        self.drafters = {
            "none": None,
            "other": ModelDrafter(TransformersRuntime(drafter_model), target_vocab_size=vocab, num_tokenizer_ids=vocab, name="other"),
            "ngram": NgramDrafter(),
        }

    def generate(self, input_ids, *, drafter, config, cancel=None):
        yield from self.engine.generate(input_ids, self.drafters[drafter], config, cancel)


class ContractDrafter(StatelessDrafter):
    """Proposes ``make(max_tokens)`` ids: used to break the drafter contract on purpose."""

    name = "contract"

    def __init__(self, make):
        self.make = make

    def propose(self, ids, max_tokens, config, generator):
        return Draft(torch.tensor(self.make(max_tokens), dtype=torch.long), None, 0)
