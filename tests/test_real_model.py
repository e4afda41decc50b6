"""Real model: SmolLM2-135M-Instruct from PyPI (converted once per session), fp32.

Greedy identity against target-only decoding for every drafter this model has (n-gram, its
own int4 copy, and itself as a stand-in sibling), and the CLI end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from lossless import naive_greedy

from specchat.core.config import GenerationConfig
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import RoundEvent
from specchat.drafters import ModelDrafter, NgramDrafter
from specchat.runtimes import loading
from specchat.runtimes.transformers import TransformersRuntime
from specchat.service import eos_token_ids

pytestmark = pytest.mark.real_model

PROMPT = (
    "<|im_start|>user\nRepeat this code exactly:\n"
    "def area(w, h):\n    return w * h\n\nprint(area(3, 4))<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def smol(smollm2_dir):
    tok = loading.load_tokenizer(smollm2_dir)
    model = loading.load_model(smollm2_dir, dtype=torch.float32)
    engine = SpeculativeEngine(TransformersRuntime(model), tok, eos_token_ids=eos_token_ids(model, tok))
    return engine, tok, model


def test_chat_template_and_target_only(smol):
    engine, tok, model = smol
    assert tok.chat_template is not None
    ids = tok(PROMPT).input_ids
    ref = naive_greedy(model, ids, 40, engine.eos_token_ids)
    done = list(engine.generate(ids, None, GenerationConfig(max_new_tokens=40)))[-1]
    assert list(done.token_ids) == ref
    assert "area" in done.text


PROMPTS = {
    # the n-gram drafter is mostly right when the answer repeats the prompt…
    "edit": "<|im_start|>user\nFix the typo in this code and print the whole code: def add(a, b):\n    retrun a + b\n\n"
    "def sub(a, b):\n    return a - b<|im_end|>\n<|im_start|>assistant\n",
    # …and mostly wrong on an open question
    "chat": "<|im_start|>user\nName three animals that live in the ocean and say one fact about each.<|im_end|>\n"
    "<|im_start|>assistant\n",
}
# (prompt, drafter) → range of the acceptance rate α (accepted / judged drafts, the estimate
# ALGORITHM.md uses) that makes the case what it claims to be
REGIME = {
    ("edit", "ngram"): (0.5, 1.0),  # measured 0.62-0.70 over γ = 1, 2, 4, 8
    ("chat", "ngram"): (0.0, 0.4),  # measured 0.22-0.30
    ("edit", "int4"): (0.6, 1.0),  # measured 0.86-0.92
    ("chat", "int4"): (0.6, 1.0),  # measured 0.82-0.87
    ("edit", "self"): (1.0, 1.0),
    ("chat", "self"): (1.0, 1.0),
}
_REFERENCE: dict[str, list[int]] = {}


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("prompt, drafter_kind", list(REGIME))
def test_greedy_identity_real_model(smol, smollm2_dir, prompt, drafter_kind, gamma):
    """fp32 greedy: every drafter gives the naive target-only loop's tokens, for every γ."""
    engine, tok, model = smol
    ids = tok(PROMPTS[prompt]).input_ids
    if prompt not in _REFERENCE:
        _REFERENCE[prompt] = naive_greedy(model, ids, 32, engine.eos_token_ids)
    vocab = model.get_output_embeddings().weight.shape[0]
    if drafter_kind == "ngram":
        drafter = NgramDrafter()
    else:
        m = model if drafter_kind == "self" else _int4(smollm2_dir)
        drafter = ModelDrafter(TransformersRuntime(m), target_vocab_size=vocab, num_tokenizer_ids=len(tok), name=drafter_kind)
    events = list(engine.generate(ids, drafter, GenerationConfig(num_speculative_tokens=gamma, max_new_tokens=32)))
    assert list(events[-1].token_ids) == _REFERENCE[prompt]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    judged = sum(min(r.num_drafted, r.num_committed) for r in rounds)  # up to the first rejection or a stop
    alpha = sum(r.num_accepted for r in rounds) / max(judged, 1)
    lo, hi = REGIME[prompt, drafter_kind]
    assert judged >= 5 and lo <= alpha <= hi, f"{judged} drafts judged, α {alpha:.2f}"


_INT4 = {}


def _int4(path):
    if "m" not in _INT4:
        _INT4["m"] = loading.load_model(path, dtype=torch.float32, int4=True)
    return _INT4["m"]


@pytest.mark.subprocess
def test_cli_json_end_to_end(smollm2_dir):
    cmd = [
        sys.executable,
        "-m",
        "specchat",
        "generate",
        "--target",
        str(smollm2_dir),
        "--drafter",
        "ngram",
        "--chat",
        "--prompt",
        "Say hello.",
        "--max-new-tokens",
        "12",
        "--num-samples",
        "2",
        "--temperature",
        "0.8",
        "--seed",
        "7",
        "--dtype",
        "float32",
        "--json",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 2 and [s["seed"] for s in lines] == [7, 8]
    for s in lines:
        assert len(s["token_ids"]) == len(s["kinds"]) <= 12
        assert set(s["kinds"]) <= {"accepted", "resampled", "bonus", "target"}
        # each round commits one token that is not an accepted draft (a stop may cut the last
        # round's); a round that drafted nothing commits exactly one, of kind target
        assert s["stats"]["num_rounds"] - 1 <= len(s["kinds"]) - s["kinds"].count("accepted") <= s["stats"]["num_rounds"]
        assert s["kinds"].count("target") == s["stats"]["num_target"] == s["stats"]["num_target_only_rounds"]
        assert s["stop_reason"] in ("eos", "max_new_tokens")
        assert {"acceptance_rate", "mean_tokens_per_round", "tokens_per_s"} <= set(s["stats"])


@pytest.mark.subprocess
@pytest.mark.slow
def test_audit_cli_passes_on_smollm2_int4(smollm2_dir):
    cmd = [
        sys.executable,
        "-m",
        "specchat",
        "audit",
        "--target",
        str(smollm2_dir),
        "--drafter",
        "int4",
        "--samples",
        "60",
        "--max-new-tokens",
        "24",
        "--dtype",
        "float32",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "[1/2] greedy" in out.stdout and "identical to target-only  PASS" in out.stdout
    assert "[2/2] sampled, 60 draws" in out.stdout and "drafted in 60 of 60 draws" in out.stdout


@pytest.mark.subprocess
@pytest.mark.slow
def test_cli_json_has_same_run_speedups_and_plain_output_ends_with_a_newline(smollm2_dir):
    """stats.speedup is measured against target-only steps timed in the same reply: exactly 1 for
    the drafter 'none' (up to the rounds' bookkeeping); with ngram, speedup and its prediction
    are numbers once a target-only round was timed. The plain reply ends with a newline."""
    base = [sys.executable, "-m", "specchat", "generate", "--target", str(smollm2_dir), "--chat", "--dtype", "float32",
            "--prompt", "Write a Python function that adds two numbers.", "--max-new-tokens", "40"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    stats = {}
    for drafter in ("none", "ngram"):
        out = subprocess.run([*base, "--drafter", drafter, "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        stats[drafter] = json.loads(out.stdout)["stats"]
    assert stats["none"]["speedup"] == pytest.approx(1.0, abs=1e-3) and stats["none"]["speedup_predicted"] is None
    ngram = stats["ngram"]
    assert ngram["num_target_only_rounds"] >= 1 and ngram["target_step_ms"] > 0
    assert ngram["speedup"] > 0 and ngram["speedup_predicted"] > 0
    plain = subprocess.run([*base, "--drafter", "ngram"], capture_output=True, text=True, env=env, timeout=300)
    assert plain.returncode == 0 and plain.stdout.endswith("\n")
    summary, ledger = plain.stderr.strip().splitlines()[-2:]
    assert summary.startswith("[ngram] ") and (
        "target steps timed in this reply (95 % interval)" in summary or "speedup held back (timing:" in summary)
    assert ledger.startswith("ledger: ") and "target passes for" in ledger and "ĉ=0.00" in ledger
    # several samples: each starts with a line naming it, and each summary line says which it is
    two = subprocess.run([*base, "--drafter", "ngram", "--num-samples", "2", "--max-new-tokens", "8", "--seed", "5"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    assert two.stdout.startswith("--- sample 1/2 (seed 5) ---\n") and "\n--- sample 2/2 (seed 6) ---\n" in two.stdout
    summaries = [line for line in two.stderr.splitlines() if line.startswith("[ngram")]
    assert [line.split("]")[0] for line in summaries] == ["[ngram, sample 1/2", "[ngram, sample 2/2"]


@pytest.mark.subprocess
def test_chat_script_reuses_the_conversation_cache(smollm2_dir, tmp_path):
    """`chat --script`: one JSON object per turn. Turn 1 prefills its whole prompt but the last
    token; later turns prefill only what follows the kept conversation (prefill_tokens), and
    their replies are token-identical to a run that prefills everything every turn (greedy,
    fp32)."""
    script = tmp_path / "chat.json"
    script.write_text(json.dumps(["Name a fruit.", "And a vegetable?", "Now a color."]), encoding="utf-8")
    base = [sys.executable, "-m", "specchat", "chat", "--script", str(script), "--target", str(smollm2_dir),
            "--drafter", "ngram", "--dtype", "float32", "--max-new-tokens", "12", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = []
    for extra in ([], ["--no-prefix-cache"]):
        out = subprocess.run(base + extra, capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append([json.loads(line) for line in out.stdout.splitlines() if line.strip()])
    cached, plain = runs
    assert [t["turn"] for t in cached] == [1, 2, 3]
    for t in cached + plain:
        assert {"turn", "text", "token_ids", "ttft_ms", "prefill_tokens", "stats"} <= set(t)
        assert t["ttft_ms"] > 0 and t["stats"]["num_tokens"] == len(t["token_ids"])
    assert [t["token_ids"] for t in cached] == [t["token_ids"] for t in plain]
    assert [t["num_prompt_tokens"] for t in cached] == [t["num_prompt_tokens"] for t in plain]
    assert all(t["prefill_tokens"] == t["num_prompt_tokens"] - 1 for t in plain)
    assert cached[0]["prefill_tokens"] == cached[0]["num_prompt_tokens"] - 1
    for before, t in zip(cached, cached[1:]):
        # the kept prefix covers at least the previous prompt (all but its last token)
        assert t["prefill_tokens"] <= t["num_prompt_tokens"] - before["num_prompt_tokens"]


def test_chat_script_errors(tmp_path, capsys):
    from specchat.commands.cli import main

    for content, message in (("not json", "not JSON"), ("[]", "non-empty JSON list"), ('["hi", "  "]', "message 2")):
        path = tmp_path / "s.json"
        path.write_text(content, encoding="utf-8")
        assert main(["chat", "--script", str(path)]) == 2
        assert message in capsys.readouterr().err
    assert main(["chat", "--script", str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err
