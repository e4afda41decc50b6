"""Soak (issue 5): many chat turns on one loaded SmolLM2-135M, like a long app session.

Both are in the ``slow`` tier (``python -m pytest -m slow tests/test_soak.py``): the short soak
(~40 s of turns here) runs in ``.ci/run``'s second stage, the 100-turn one only when asked.
Both use ``specchat.commands.bench.soak.run_soak`` (also ``specchat soak``) with a 256-token context window,
so the history is trimmed after a few turns and the prompt length levels off: per-token latency
is then comparable between early and late turns.

Bounds, from measurements on the project's 2-core CPU (1 torch thread; numbers in the
comments). Memory: measured growth after warm-up is ~0.1 MiB; the bounds sit far above it
and far below what one leaked KV cache per turn would add (SmolLM2's fp32 cache of 256
positions is 30 layers x K,V x 3 heads x 64 x 256 x 4 B = 11.8 MB). Latency: the machine is
shared, so wall times are also scaled by this process's CPU share, and bounds are 1.3-2x.

First principles: after the soak, a greedy turn on the soak's own (trimmed) history gives
exactly the tokens of plain ``transformers`` greedy generation, on a separately loaded copy
of the model, of the same prompt ids, for every drafter the soak used.
"""

from __future__ import annotations

import pytest
import torch

from specchat.commands.bench.soak import ABANDON, CANCEL, FULL, Turn, format_summary, run_soak, slope, summarize
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent

pytestmark = pytest.mark.real_model

CONTEXT = 256
GAMMA = 4
PROBE = "Write a Python function that returns the n-th Fibonacci number."
PROBE_TOKENS = 24


@pytest.fixture(scope="module")
def service(smollm2_dir):
    from specchat.commands.bench.soak import make_service

    return make_service(str(smollm2_dir), dtype="float32", context_length=CONTEXT)


@pytest.fixture(scope="module")
def fresh_model(smollm2_dir):
    """The target loaded again with plain transformers: shares no object with the service."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()


def check_contract(result: dict) -> None:
    """What must hold for every turn of any soak, whatever the machine."""
    s, turns, history = result["summary"], result["turns"], result["history"]
    # the app's rule: a turn is kept when it wrote a token or ended by itself (not an abandoned or
    # stopped one before its first token); the kept turns, in order, are the history
    kept = [t for t in turns if t["kept"]]
    assert [t["kept"] for t in turns] == [t["new_tokens"] >= 1 or (t["done"] and t["stop_reason"] != "cancelled")
                                          for t in turns]
    assert len(history) == 2 * len(kept)
    position = {t["turn"]: 2 * i + 1 for i, t in enumerate(kept)}
    for t in turns:
        where = f"turn {t['turn']} ({t['action']}, {t['drafter']})"
        # the engine is idle between turns: no KV cache kept, no owner, lock free
        assert t["target_cache_released"] and t["engine_idle"], where
        if t["action"] == ABANDON:
            assert not t["done"], where  # closed before its end: no DoneEvent, nothing leaked
            continue
        assert t["done"] and t["text_consistent"], where  # streamed text + final_text == DoneEvent.text
        assert t["prompt_tokens"] + t["new_tokens"] <= CONTEXT, where  # trimming keeps room for the reply
        kept = history[position[t["turn"]]]["content"] if t["kept"] else ""
        assert len(kept) == t["reply_chars"], where
        if t["action"] == CANCEL:
            # Stop is honoured between rounds: the round in progress finishes, no other starts
            assert t["rounds_after_cancel"] == 1 and t["tokens_after_cancel"] <= GAMMA, where
            # cancelled, unless that round itself ended the reply (an EOS among its tokens)
            assert t["stop_reason"] in ("cancelled", "eos"), where
            assert t["new_tokens"] >= 1 and kept, where  # the partial reply is kept in the history
    assert s["every_unabandoned_turn_done"] and s["engine_idle_every_turn"]
    assert s["actions"].get(CANCEL) and s["actions"].get(ABANDON)
    assert s["stop_reasons"].get("cancelled"), "no cancelled turn: the soak did not exercise Stop"
    # the first trim's turn moves with the Stopped turns' lengths (adaptive γ follows the timings):
    # turn 8 of 16 on a slow run; half the turns still run on a trimmed history
    assert s["notices"] >= 1 and s["first_notice_turn"] <= len(turns) // 2, "the history was never trimmed"


def check_against_plain_transformers(service, fresh_model, history: list[dict], drafters) -> None:
    ids, _ = service.encode_chat(history, PROBE, PROBE_TOKENS)
    with torch.inference_mode():
        out = fresh_model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=PROBE_TOKENS,
            eos_token_id=sorted(service.engine.eos_token_ids),
            pad_token_id=fresh_model.config.pad_token_id,
        )
    expected = out[0, len(ids) :].tolist()
    assert len(expected) >= 8
    for kind in drafters:
        config = GenerationConfig(max_new_tokens=PROBE_TOKENS, num_speculative_tokens=GAMMA, adaptive_gamma=True)
        done = list(service.stream_chat(history, PROBE, drafter=kind, config=config))[-1]
        assert isinstance(done, DoneEvent) and done.num_prompt_tokens == len(ids)
        assert list(done.token_ids) == expected, f"drafter {kind}: greedy reply after the soak differs"
    assert service.engine.released


@pytest.mark.slow
def test_soak_short(service, fresh_model):
    """16 turns of 16 tokens, n-gram and target-only alternating (measured: 22-25 s of turns)."""
    result = run_soak(
        service, 16, drafters=("ngram", "none"), max_new_tokens=16, num_speculative_tokens=GAMMA,
        cancel_every=4, abandon_every=6, warmup=4,
    )  # fmt: skip
    print(format_summary(result))  # shown with -s, and on failure
    check_contract(result)
    s = result["summary"]
    # measured over turns 5-16: +0.1 MiB (RSS ~1.6 GiB with the reference model); bound 40 MiB
    assert s["rss_growth_after_warmup_mb"] < 40, s
    # latency: one verification pass (a target forward on a ~230-token prompt), scaled by
    # this process's CPU share (other processes on the machine slow wall time down), late
    # turns 14-15 over early turns 5-7: measured 0.90-0.92; and decode ms per token (wall),
    # measured 0.90-0.98. Two turns a window: the bounds are loose, 1.5x and 2x.
    assert s["verify_cpu_ms_ratio"] < 1.5, s
    assert s["ms_per_token_ratio"] < 2.0, s
    check_against_plain_transformers(service, fresh_model, result["history"], ("ngram", "none"))


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak_100_turns(request, service, fresh_model):
    """100 turns of 24 tokens, rotating n-gram, target-only and int4 drafters (measured: 3.7 min)."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the 100-turn soak runs with -m slow (python -m pytest -m slow tests/test_soak.py)")
    drafters = ("ngram", "none", "int4")
    result = run_soak(service, 100, drafters=drafters, max_new_tokens=24, num_speculative_tokens=GAMMA, warmup=10)
    print(format_summary(result))  # shown with -s, and on failure
    check_contract(result)
    check_against_plain_transformers(service, fresh_model, result["history"], drafters)
    s = result["summary"]
    # measured: RSS slope over turns 51-100 +0.002 MiB/turn, growth after turn 10 +0.1 MiB
    assert abs(s["rss_slope_second_half_mb_per_turn"]) < 0.5, s
    assert s["rss_growth_after_warmup_mb"] < 50, s
    # gc-tracked objects: the history grows by 2 message dicts a turn (measured +1.0/turn over
    # the second half); anything kept per round or per token would add hundreds
    assert s["gc_objects_slope_second_half_per_turn"] < 50, s
    # latency, early (turns 11-32) vs late (79-100): measured 0.97-0.99 (CPU-scaled verify), 1.12-1.19
    assert s["verify_cpu_ms_ratio"] < 1.3, s
    assert s["ms_per_token_ratio"] < 1.5, s
    # target-only: ms/token does not depend on what is said (n-gram's does, with acceptance:
    # measured 1.76 for n-gram, 1.04 target-only, 1.08 int4)
    assert s["ms_per_token_ratio_by_drafter"]["none"]["ratio"] < 1.3, s
    # the rest of a turn (templating the history, trimming it to the context) must not grow
    # with the length of the chat: late turns have ~200 messages of history, of which ~10 fit.
    # Measured 3.3 ms early and late with build_chat_prompt searching from the newest message;
    # 18.8 ms early and 272 ms late (quadratic) when it re-templates from the oldest.
    assert s["late"]["overhead_ms"] < 100, s


def _turn(n: int, rss: float, objects: int, ms_per_token: float, action: str = FULL) -> Turn:
    return Turn(
        turn=n, action=action, drafter="none", greedy=True, adaptive=False, history_messages=2 * (n - 1),
        notice=False, done=action != ABANDON, stop_reason="max_new_tokens", prompt_tokens=100, new_tokens=10,
        wall_ms=ms_per_token * 10 + 50, cpu_ms=ms_per_token * 10 + 50, prefill_ms=40.0, decode_ms=ms_per_token * 10, overhead_ms=10.0,
        ms_per_token=ms_per_token, rounds=10, verify_ms=ms_per_token, reply_chars=20, kept=True, text_consistent=True,
        tokens_after_cancel=None, rounds_after_cancel=None, rss_mb=rss, gc_objects=objects,
        target_cache_released=True, engine_idle=True,
    )  # fmt: skip


def test_summary_arithmetic_on_known_series():
    """The summary's numbers on series whose answers are known by hand (no model)."""
    assert slope([1, 2, 3, 4], [10, 12, 14, 16]) == pytest.approx(2.0)
    assert slope([5], [1]) == 0.0
    # 20 turns: RSS grows 0.5 MiB a turn, latency doubles in the last quarter
    records = [_turn(n, 1000 + 0.5 * n, 1000 + 3 * n, 50.0 if n <= 15 else 100.0) for n in range(1, 21)]
    s = summarize(records, warmup=4, rss_start=999.0, total_s=1.0)
    assert s["rss_turn1_mb"] == 1000.5 and s["rss_warmup_mb"] == 1002.0 and s["rss_end_mb"] == 1010.0
    assert s["rss_growth_after_warmup_mb"] == pytest.approx(8.0)
    assert s["rss_growth_per_turn_after_warmup_mb"] == pytest.approx(0.5)
    assert s["rss_slope_second_half_mb_per_turn"] == pytest.approx(0.5)
    assert s["gc_objects_slope_second_half_per_turn"] == pytest.approx(3.0)
    assert s["window_turns"] == 4 and s["early"]["turns"] == [5, 6, 7, 8] and s["late"]["turns"] == [17, 18, 19, 20]
    assert s["ms_per_token_ratio"] == pytest.approx(2.0) and s["verify_ms_ratio"] == pytest.approx(2.0)
    # interrupted turns are left out of the latency windows
    records[4] = _turn(5, 1002.5, 1015, 500.0, action=CANCEL)
    s = summarize(records, warmup=4, rss_start=999.0, total_s=1.0)
    assert s["early"]["turns"] == [6, 7, 8] and s["ms_per_token_ratio"] == pytest.approx(2.0)
