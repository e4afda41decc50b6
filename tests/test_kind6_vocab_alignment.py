"""Kind 6, vocabulary alignment.

Target and drafter may have different embedding sizes over one tokenizer; the drafter never
proposes an id the tokenizer does not have; tokenizers that really differ get a clear error.
"""

from __future__ import annotations

import pytest
from lossless import (
    ContractDrafter,
    FakeLM,
    RecordingDrafter,
    V,
    events_of,
    hashed_logits,
    model_drafter,
    naive_greedy_fn,
    script_logits,
)
from tiny_models import tiny_model

from specchat.core.engine import SpeculativeEngine
from specchat.drafters import ModelDrafter
from specchat.errors import TokenizerMismatchError
from specchat.runtimes import loading
from specchat.runtimes.transformers import TransformersRuntime


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafter_never_proposes_padding_ids(temperature):
    """A drafter whose padding rows (>= len(tokenizer)) have the highest logits never drafts them."""
    num_ids = 5

    def fn(prefix):
        out = hashed_logits(9, seed=3, scale=1.0)(prefix)
        out[num_ids:] = 50.0
        return out

    drafter = RecordingDrafter(TransformersRuntime(FakeLM(9, fn)), target_vocab_size=V, num_tokenizer_ids=num_ids, name="pad")
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=1, scale=2.0))), None)
    for seed in range(5):
        drafter.log.clear()
        events_of(
            engine, [1, 2], drafter, num_speculative_tokens=4, temperature=temperature, seed=seed, max_new_tokens=20
        )
        drafted = [t for e in drafter.log if e[0] == "drafted" for t in e[1]]
        assert drafted and max(drafted) < num_ids


def test_greedy_identity_with_drafter_vocab_smaller_and_larger():
    fn_t = hashed_logits(V, seed=6, scale=4.0)
    ref = naive_greedy_fn(fn_t, [1, 2], 30)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, fn_t)), None)
    for rows in (3, 6, 11):
        drafter = model_drafter(FakeLM(rows, hashed_logits(rows, seed=7, scale=4.0)), V, num_tokenizer_ids=min(rows, V))
        for gamma in (1, 4):
            done = events_of(engine, [1, 2], drafter, num_speculative_tokens=gamma, max_new_tokens=30)[-1]
            assert list(done.token_ids) == ref


def test_target_committing_an_id_the_drafter_cannot_embed():
    """Qwen2.5-style padding: target 300 rows, tokenizer 257 ids, drafter 270 rows.

    The target may commit any of its 300 ids (its distribution is preserved exactly, padding
    rows included). When it commits one the drafter's embedding lacks (here 280), speculative
    decoding must still give the target-only reply, not an IndexError inside the drafter.
    """
    script = [65, 66, 67, 280, 68, 69, 70, 71, 72, 73]
    prompt = [1, 2, 3]
    fn = script_logits(300, script, len(prompt), 74)
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(300, fn)), None)
    ref = events_of(engine, prompt, None, max_new_tokens=10)[-1].token_ids
    assert list(ref) == script
    drafter = ModelDrafter(TransformersRuntime(tiny_model(vocab_size=270, seed=50)), target_vocab_size=300, num_tokenizer_ids=257, name="s")
    done = events_of(engine, prompt, drafter, num_speculative_tokens=3, max_new_tokens=10)[-1]
    assert done.token_ids == ref


# Tokenizers that really differ: TokenizerMismatchError names both models and the first difference


def word_tokenizer(vocab: dict[str, int], *, lowercase: bool = False):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if lowercase:
        backend.normalizer = normalizers.Lowercase()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


VOCAB = {"[UNK]": 0, "def": 1, "fib": 2, "return": 3, "(": 4, ")": 5, "Grüße": 6, "grüße": 7, "世界": 8}


def test_same_tokenizer_passes():
    loading.check_same_tokenizer(word_tokenizer(VOCAB), word_tokenizer(dict(VOCAB)), target_name="t", drafter_name="d")


def test_different_vocab_names_both_models_and_first_token():
    other = dict(VOCAB, fib=9, fob=2)
    with pytest.raises(TokenizerMismatchError) as info:
        loading.check_same_tokenizer(
            word_tokenizer(VOCAB), word_tokenizer(other), target_name="big-model", drafter_name="small-model"
        )
    message = str(info.value)
    assert "'big-model'" in message and "'small-model'" in message
    assert "token id 2" in message and "'fib'" in message and "'fob'" in message


def test_added_token_counts_as_a_difference():
    drafter = word_tokenizer(VOCAB)
    drafter.add_tokens(["<|extra|>"])
    with pytest.raises(TokenizerMismatchError, match="<\\|extra\\|>"):
        loading.check_same_tokenizer(word_tokenizer(VOCAB), drafter, target_name="t", drafter_name="d")


def test_same_vocab_different_encoding_names_the_probe():
    with pytest.raises(TokenizerMismatchError) as info:
        loading.check_same_tokenizer(
            word_tokenizer(VOCAB), word_tokenizer(VOCAB, lowercase=True), target_name="t", drafter_name="d"
        )
    assert "Grüße" in str(info.value) and "probe" in str(info.value)


def test_a_drafter_smaller_than_the_tokenizer_never_proposes_ids_it_lacks():
    """Drafter embedding 200 rows, tokenizer 257 ids: ids 200…256 get q = 0 (padded with −inf),
    so sampling never proposes them and the next draft step can embed every draft."""
    drafter = RecordingDrafter(
        TransformersRuntime(tiny_model(vocab_size=200, seed=3)), target_vocab_size=257, num_tokenizer_ids=257, name="small"
    )
    engine = SpeculativeEngine(TransformersRuntime(tiny_model(vocab_size=257, seed=0)), None)
    for seed in range(5):
        drafter.log.clear()
        events_of(
            engine, list(b"hello"), drafter, num_speculative_tokens=4, temperature=1.0, seed=seed, max_new_tokens=20
        )
        for entry in drafter.log:
            if entry[0] == "drafted" and entry[2] is not None:
                assert max(entry[1]) < 200 and float(entry[2][:, 200:].sum()) == 0.0


def test_a_drafter_proposing_an_id_at_the_vocab_size_is_refused():
    engine = SpeculativeEngine(TransformersRuntime(FakeLM(V, hashed_logits(V, seed=1, scale=2.0))), None)
    with pytest.raises(RuntimeError, match="outside the target's vocabulary"):
        events_of(engine, [1, 2], ContractDrafter(lambda n: [V] * n), num_speculative_tokens=3, max_new_tokens=10)
