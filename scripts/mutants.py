"""Deliberate breakages: each mutant breaks one mechanism of one fault kind on purpose, and the
test family of that kind must fail (issue 3: "tests that fail when the mechanism is broken").

Usage (from the repository root, in the test venv):

    python scripts/mutants.py                 # every mutant, then a table
    python scripts/mutants.py --list          # names, kinds and what each breaks
    python scripts/mutants.py --only NAME …   # some mutants
    python scripts/mutants.py --markdown      # the table as Markdown

For each mutant: copy the work tree (git's tracked and untracked-but-not-ignored files) to a
temporary folder, replace one snippet of source, and run ``pytest -x`` on the mutant's test
files there. Snippets are anchored by their text, not by their indentation: a snippet still
matches when a refactor moves its code into a helper at another depth (:func:`locate`), and
the replacement is re-indented to match. The mutant is KILLED when pytest fails, and the first failing test is shown;
it SURVIVED when every test passed, which means a hole in the tests. The unmutated tests run
first and must pass. Exit status: 0 when every mutant was killed, 1 otherwise.

Each mutant's snippet must occur exactly once in its file, and the mutated file must still
compile; ``tests/test_mutants.py`` checks both, so the list keeps up with the code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAMILY = {
    1: ["tests/test_kind1_bookkeeping.py", "tests/test_greedy_identity.py", "tests/test_prefix_cache.py", "tests/test_runtime.py",
        "tests/test_catch_up.py"],
    2: ["tests/test_kind2_verify_alignment.py", "tests/test_greedy_identity.py"],
    3: ["tests/test_kind3_pq_consistency.py", "tests/test_audit.py", "tests/test_distribution.py"],
    4: ["tests/test_kind4_accept_numerics.py", "tests/test_distribution.py"],
    5: ["tests/test_kind5_termination.py", "tests/test_events.py"],
    6: ["tests/test_kind6_vocab_alignment.py"],
    7: ["tests/test_kind7_context_bounds.py", "tests/test_text_chat.py"],
    8: ["tests/test_kind8_numerical_invariance.py"],
    9: ["tests/test_kind9_lifecycle.py"],
    10: ["tests/test_events.py", "tests/test_theory_metrics.py", "tests/test_timing.py", "tests/test_charts.py"],
    11: ["tests/test_session.py", "tests/test_conversation.py", "tests/test_wiring.py"],
    12: ["tests/test_trace.py", "tests/test_inspector.py"],
    13: ["tests/test_ledger.py"],
    14: ["tests/test_hybrid.py", "tests/test_calibrate.py", "tests/test_compiled.py"],
    15: ["tests/test_zerogpu.py"],
    16: ["tests/test_runtime.py", "tests/test_llamacpp.py"],
    17: ["tests/test_adaptive.py", "tests/test_timing.py"],
    18: ["tests/test_events.py", "tests/test_trace.py", "tests/test_app.py", "tests/test_audit.py"],
    19: ["tests/test_prefill_progress.py", "tests/test_session_queue_restore.py"],
    20: ["tests/test_last_reply.py", "tests/test_chats.py", "tests/test_conversation.py", "tests/test_markdown.py"],
    21: ["tests/test_live.py"],
}
KIND_NAMES = {
    1: "bookkeeping after partial acceptance",
    2: "verify alignment",
    3: "p/q consistency",
    4: "accept-rule numerics",
    5: "termination inside a multi-token commit",
    6: "vocabulary alignment",
    7: "context bounds",
    8: "numerical non-invariance",
    9: "resource lifecycle",
    10: "events and stats",
    11: "a browser session (send, queue, Stop, Clear, labels)",
    12: "round traces and the views built on them",
    13: "the cost ledger and the exactness proof view",
    14: "the hybrid drafter, the drafter picked by measurement and the compiled target",
    15: "a reply in ZeroGPU's forked worker (Stop across the process boundary)",
    16: "the llama.cpp runtime (rollback, logits rows, kept prefix)",
    17: "adaptive γ's pause (γ = 0 with probes: the decision, the probe budget, the probe's costs)",
    18: "token kinds (a round with no draft commits a target token, never a bonus; old traces read so)",
    19: "a long prefill in passes (Stop in it), a queued message's own cancel, the conversation restored",
    20: "the last reply (Regenerate, Edit, Continue and how it renders), several chats (Delete, Undo), the settings kept, commas that wrap",
    21: "a streaming reply's live channel (the latest value only, Gradio while no page reads it, the reply's end)",
}


@dataclass(frozen=True)
class Mutant:
    """One deliberate breakage: replace ``old`` by ``new`` in ``path`` (exactly one occurrence)."""

    name: str
    kind: int
    path: str
    old: str
    new: str
    what: str

    @property
    def tests(self) -> list[str]:
        return FAMILY[self.kind]


MUTANTS = [
    # -- 1. bookkeeping ---------------------------------------------------------------------
    Mutant(
        "target-cache-not-cut",
        1,
        "specchat/core/engine.py",
        "        self.target.truncate(num_valid)\n",
        "        pass\n",
        "the target's KV cache keeps the rejected drafts after a partial acceptance",
    ),
    Mutant(
        "target-cache-cut-one-long",
        1,
        "specchat/core/engine.py",
        "self.target.truncate(num_valid)",
        "self.target.truncate(min(num_valid + 1, self.target.num_cached))",
        "the target's cache keeps one position too many (the first rejected draft)",
    ),
    Mutant(
        "drafter-not-rolled-back",
        1,
        "specchat/core/engine.py",
        '            self.call_drafter(state, state.drafter.rollback, num_valid)\n',
        '            pass\n',
        "the drafter's cache keeps its rejected drafts",
    ),
    Mutant(
        "catch-up-unbounded",
        1,
        "specchat/drafters/model.py",
        "        if len(pending) > MAX_CATCH_UP_TOKENS:\n",
        "        if False:\n",
        "a drafter far behind reads every committed id it missed (a probe after a long pause costs many target steps)",
    ),
    Mutant(
        "catch-up-cut-ignores-gap",
        1,
        "specchat/drafters/model.py",
        "        keep = num_valid - self._skipped\n",
        "        keep = num_valid\n",
        "a drafter with a gap in its cache is cut as if it had none (rejected drafts stay in it)",
    ),
    Mutant(
        "kept-prefix-past-the-gap",
        1,
        "specchat/drafters/model.py",
        "        ids = ids if self._gap_at is None else ids[: self._gap_at + 1]\n",
        "        pass\n",
        "the conversation prefix kept for the next reply runs past the drafter's gap",
    ),
    Mutant(
        "drafter-no-catch-up",
        1,
        "specchat/drafters/model.py",
        "        pending = ids[fed:]\n",
        "        pending = ids[-1:]\n",
        "after full acceptance the drafter feeds only the bonus token, skipping the last draft",
    ),
    Mutant(
        "sliding-window-cut-anyway",
        1,
        "specchat/runtimes/transformers.py",
        'if not getattr(layer, "is_croppable", False) or past_window:',
        'if not getattr(layer, "is_croppable", False):',
        "a sliding-window layer past its window is cut instead of refused",
    ),
    Mutant(
        "prefix-reused-past-a-mismatch",
        1,
        "specchat/runtimes/transformers.py",
        "        n = common_prefix(self._ids, prefix_ids) if reuse and cache is not None else 0\n",
        "        n = min(len(self._ids), len(prefix_ids)) if reuse and cache is not None else 0\n",
        "a kept conversation cache is reused as far as it is long, not as far as its tokens match the prompt",
    ),
    Mutant(
        "runtime-ids-not-cut",
        1,
        "specchat/runtimes/transformers.py",
        "        del self._ids[num_positions:]\n",
        "        pass\n",
        "the runtime cuts its KV cache but not its record of the cached ids (a kept prefix then names tokens it no longer holds)",
    ),
    Mutant(
        "prefix-kept-from-an-abandoned-generation",
        1,
        "specchat/core/engine.py",
        "        self._finished = None\n        prefix = state.ids[:-1]",
        "        self._finished = (state.ids, True)\n        prefix = state.ids[:-1]",
        "the caches of a generation abandoned mid-reply are kept for reuse",
    ),
    # -- 2. verify alignment ----------------------------------------------------------------
    Mutant(
        "verify-against-next-row",
        2,
        "specchat/core/sampling.py",
        "    p_x = target_probs[rows, draft_token_ids]\n",
        "    p_x = target_probs[rows + 1, draft_token_ids]\n",
        "draft i is judged with p of the prefix one token later",
    ),
    Mutant(
        "accepted-count-not-leading-run",
        2,
        "specchat/core/sampling.py",
        "    while num_accepted < gamma and accepted[num_accepted]:\n        num_accepted += 1\n",
        "    num_accepted = min(int(sum(accepted)), gamma)\n",
        "accepted count = all acceptances, not the leading run",
    ),
    Mutant(
        "bonus-from-last-draft-row",
        2,
        "specchat/core/sampling.py",
        "return VerifyResult(gamma, mask, sample(target_probs[gamma], generator), TokenKind.BONUS, u)",
        "return VerifyResult(gamma, mask, sample(target_probs[gamma - 1], generator), TokenKind.BONUS, u)",
        "the bonus token is drawn from the last draft's row, not the row after it",
    ),
    # -- 3. p/q consistency -----------------------------------------------------------------
    Mutant(
        "drafter-reports-unwarped-q",
        3,
        "specchat/drafters/model.py",
        "                probs.append(q)\n",
        "                probs.append(torch.softmax(self._align(logits), dim=-1)[0])\n",
        "the drafter samples from the warped q but reports q before the warpers",
    ),
    Mutant(
        "target-ignores-top-p",
        3,
        "specchat/core/engine.py",
        "target_logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p",
        "target_logits, temperature=config.temperature, top_k=config.top_k, top_p=1.0",
        "target_probs skip top-p while draft_probs apply it",
    ),
    Mutant(
        "drafter-ignores-temperature",
        3,
        "specchat/drafters/model.py",
        "q = logits_to_probs(logits, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)[0]",
        "q = logits_to_probs(logits, temperature=1.0 if config.temperature else 0.0, top_k=config.top_k, top_p=config.top_p)[0]",
        "the drafter warps with temperature 1 whatever the setting (lossless still, but not the same chain)",
    ),
    # -- 4. accept-rule numerics ------------------------------------------------------------
    Mutant(
        "accept-when-equal",
        4,
        "specchat/core/sampling.py",
        "    accepted = (u * q_x < p_x).tolist()\n",
        "    accepted = (u * q_x <= p_x).tolist()\n",
        "u·q ≤ p: a token with p = 0 is accepted when u = 0",
    ),
    Mutant(
        "residual-without-fallback",
        4,
        "specchat/core/sampling.py",
        "    if mass <= RESIDUAL_MASS_EPS:\n        return target_probs\n",
        "    if mass <= 0.0:\n        return target_probs\n",
        "a residual with only rounding mass (p = q) is normalised instead of falling back to p",
    ),
    Mutant(
        "residual-is-p",
        4,
        "specchat/core/sampling.py",
        "        residual = torch.clamp(target_probs - draft_probs, min=0.0)\n",
        "        residual = target_probs.clone()\n",
        "after a rejection, resample from p instead of norm(max(0, p − q))",
    ),
    Mutant(
        "one-hot-residual-keeps-draft",
        4,
        "specchat/core/sampling.py",
        "        residual[draft_token_id] = 0.0\n",
        "        pass\n",
        "with a one-hot q the rejected draft token stays in the residual",
    ),
    # -- 5. termination ---------------------------------------------------------------------
    Mutant(
        "commit-past-the-stop",
        5,
        "specchat/core/engine.py",
        "            if state.stop is not None:\n                break\n",
        "",
        "tokens after an EOS / budget / stop string in the same round are still committed",
    ),
    Mutant(
        "draft-ignores-budget",
        5,
        "specchat/core/engine.py",
        "max_draft = min(num_speculative_tokens, remaining - 1, room - 1)",
        "max_draft = min(num_speculative_tokens, room - 1)",
        "drafts are not capped by the remaining max_new_tokens",
    ),
    Mutant(
        "drafted-eos-ends-reply",
        5,
        "specchat/core/engine.py",
        '        token_events = self._commit(state, config, draft, result, target_probs)  # a stop may cut the commit\n',
        '        token_events = self._commit(state, config, draft, result, target_probs)  # a stop may cut the commit\n        if any(t in self.eos_token_ids for t in draft.token_ids.tolist()):\n            state.stop = StopReason.EOS\n',
        "a drafted EOS ends the reply even when the target rejects it",
    ),
    Mutant(
        "stop-prefix-not-held",
        5,
        "specchat/core/text.py",
        "            keep = self._stop_prefix_len(self._held)\n",
        "            keep = 0\n",
        "text that may begin a stop string is streamed before the stop string completes",
    ),
    # -- 6. vocabulary alignment ------------------------------------------------------------
    Mutant(
        "padding-ids-proposed",
        6,
        "specchat/drafters/model.py",
        '            logits[:, self.num_tokenizer_ids :] = float("-inf")\n',
        "            pass\n",
        "the drafter may propose embedding padding rows that are not tokenizer ids",
    ),
    Mutant(
        "unembeddable-id-fed-to-drafter",
        6,
        "specchat/drafters/model.py",
        "        if max(pending) >= self.num_input_ids:\n",
        "        if False:\n",
        "a committed id past the drafter's embedding is fed to it",
    ),
    Mutant(
        "tokenizer-vocab-not-compared",
        6,
        "specchat/runtimes/loading.py",
        "    if target_vocab != drafter_vocab:\n",
        "    if False:\n",
        "tokenizers are compared by probes only, not vocabularies",
    ),
    # -- 7. context bounds ------------------------------------------------------------------
    Mutant(
        "draft-ignores-context",
        7,
        "specchat/core/engine.py",
        "max_draft = min(num_speculative_tokens, remaining - 1, room - 1)",
        "max_draft = min(num_speculative_tokens, remaining - 1)",
        "drafts are not capped by the room left in the context window",
    ),
    Mutant(
        "context-full-not-a-stop",
        7,
        "specchat/core/engine.py",
        '        elif len(state.ids) >= self.context_length:\n            return StopReason.CONTEXT_FULL\n',
        '',
        "generation goes on past the context window",
    ),
    Mutant(
        "empty-prompt-accepted",
        7,
        "specchat/core/engine.py",
        "        if not prompt_ids:\n",
        "        if prompt_ids is None:\n",
        "an empty prompt is not refused with a clear error",
    ),
    Mutant(
        "blank-message-accepted",
        7,
        "specchat/runtimes/chat.py",
        "    if is_blank(message):\n",
        "    if not message:\n",
        "a whitespace-only chat message is sent to the model",
    ),
    # -- 8. numerical non-invariance --------------------------------------------------------
    Mutant(
        "gap-measured-one-late",
        8,
        "specchat/analysis/audit.py",
        "        logits = target_logits(model, input_ids + reference[:index], 1)[0]\n",
        "        logits = target_logits(model, input_ids + reference[: index + 1], 1)[0]\n",
        "the audit measures the top-2 gap one position after the divergence",
    ),
    Mutant(
        "any-gap-is-a-tie",
        8,
        "specchat/analysis/audit.py",
        "        return self.gap <= tolerance\n",
        "        return True\n",
        "every divergence is excused as a near-tie",
    ),
    Mutant(
        "tolerance-ignores-dtype",
        8,
        "specchat/analysis/audit.py",
        "    return max(1e-3, 2.0 * torch.finfo(dtype).eps * abs(top_logit))\n",
        "    return 1.0\n",
        "a fixed, loose tie tolerance whatever the dtype",
    ),
    # -- 9. resource lifecycle --------------------------------------------------------------
    Mutant(
        "target-cache-kept",
        9,
        "specchat/core/engine.py",
        "                else:\n                    self.target.release()\n",
        "                else:\n                    pass\n",
        "the target's KV cache outlives its generation",
    ),
    Mutant(
        "drafter-end-skipped",
        9,
        "specchat/core/engine.py",
        "                if drafter is not None:\n                    drafter.end()\n",
        "",
        "the drafter's cache is not released when a generation ends",
    ),
    Mutant(
        "cleanup-without-owner-check",
        9,
        "specchat/core/engine.py",
        "            if self._current is token:\n",
        "            if True:\n",
        "a late-finalised abandoned generator clears the state of a newer one",
    ),
    Mutant(
        "round-history-leak",
        9,
        "specchat/core/engine.py",
        'target_probs, result = self._verify(state, draft, config, generator)',
        "target_probs, result = self._verify(state, draft, config, generator); SpeculativeEngine._history = [*getattr(SpeculativeEngine, '_history', []), target_probs]",
        "every round's target_probs are kept forever (memory grows with each request)",
    ),
    # -- found by an independent mutation hunt (a helper session that had not seen the tests' design) --
    Mutant(
        "seed-zero-is-random",
        3,
        "specchat/core/engine.py",
        "seed = config.seed if config.seed is not None else random.randrange(2**63)",
        "seed = config.seed or random.randrange(2**63)",
        "seed 0 is treated as 'no seed': a fixed seed no longer reproduces",
    ),
    Mutant(
        "drafter-sample-unseeded",
        3,
        "specchat/drafters/model.py",
        "token = int(torch.multinomial(q, 1, generator=generator))",
        "token = int(torch.multinomial(q, 1))",
        "the drafter samples its drafts without the generation's seeded generator",
    ),
    Mutant(
        "residual-q-from-first-draft",
        2,
        "specchat/core/sampling.py",
        "residual = residual_probs(target_probs[i], None if draft_probs is None else draft_probs[i], token)",
        "residual = residual_probs(target_probs[i], None if draft_probs is None else draft_probs[0], token)",
        "the residual at a rejection uses q of draft 0, not of the rejected position",
    ),
    Mutant(
        "q-from-first-row",
        2,
        "specchat/core/sampling.py",
        "q_x = torch.ones_like(p_x) if draft_probs is None else draft_probs[rows, draft_token_ids]",
        "q_x = torch.ones_like(p_x) if draft_probs is None else draft_probs[0, draft_token_ids]",
        "every draft is judged with q of the first draft position",
    ),
    Mutant(
        "residual-eps-too-loose",
        4,
        "specchat/core/sampling.py",
        "RESIDUAL_MASS_EPS = 1e-6",
        "RESIDUAL_MASS_EPS = 1e-2",
        "a residual with mass below 1e-2 is thrown away for p (biased, ~1 % TV)",
    ),
    Mutant(
        "top-p-boundary-strict",
        3,
        "specchat/core/sampling.py",
        "remove_sorted = mass_before >= top_p",
        "remove_sorted = mass_before > top_p",
        "top-p keeps a token whose preceding mass already equals p",
    ),
    Mutant(
        "top-p-before-temperature",
        3,
        "specchat/core/sampling.py",
        "sorted_probs = torch.softmax(sorted_logits, dim=-1)",
        "sorted_probs = torch.softmax(sorted_logits * temperature, dim=-1)",
        "the top-p cut is computed before the temperature is applied",
    ),
    Mutant(
        "top-k-drops-ties",
        3,
        "specchat/core/sampling.py",
        '        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]\n        logits = logits.masked_fill(logits < kth, float("-inf"))\n',
        '        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, torch.topk(logits, top_k, dim=-1).indices, True)\n        logits = logits.masked_fill(~keep, float("-inf"))\n',
        "top-k drops tokens tied with the k-th logit",
    ),
    Mutant(
        "probs-keep-input-dtype",
        8,
        "specchat/core/sampling.py",
        "    logits = logits.float()\n    if temperature == 0.0:",
        "    if temperature == 0.0:",
        "warping bf16 logits in bf16: p rows no longer sum to 1 within float32",
    ),
    Mutant(
        "rejected-q-of-resampled-token",
        2,
        "specchat/core/generation.py",
        "rejected_q = 1.0 if draft_probs is None else float(draft_probs[pos, rejected])",
        "rejected_q = 1.0 if draft_probs is None else float(draft_probs[pos, token])",
        "a resampled token's event reports q of the new token, not of the rejected draft",
    ),
    Mutant(
        "drafter-rollback-one-long",
        1,
        "specchat/core/engine.py",
        '            self.call_drafter(state, state.drafter.rollback, num_valid)\n',
        '            self.call_drafter(state, state.drafter.rollback, num_valid + 1)\n',
        "the drafter's cache keeps one rejected draft",
    ),
    Mutant(
        "sliding-window-boundary",
        1,
        "specchat/runtimes/transformers.py",
        "past_window = window is not None and layer.get_seq_length() >= window and",
        "past_window = window is not None and layer.get_seq_length() > window and",
        "a sliding layer exactly at its window is cut instead of refused",
    ),
    Mutant(
        "chat-drops-user-without-reply",
        7,
        "specchat/runtimes/chat.py",
        's += 2 if len(turns) - s > 1 and turns[s + 1].get("role") == "assistant" else 1',
        "s += 1",
        "trimming drops only the user turn, leaving history that starts with the assistant",
    ),
    Mutant(
        "chat-budget-off-by-one",
        7,
        "specchat/runtimes/chat.py",
        "return len(ids_from(k)) + max_new_tokens <= context_length or k == len(starts) - 1",
        "return len(ids_from(k)) + max_new_tokens < context_length or k == len(starts) - 1",
        "an exact fit of prompt + max_new_tokens is trimmed anyway",
    ),
    Mutant(
        "cancel-flush-drops-pending-bytes",
        5,
        "specchat/core/text.py",
        "release = self._held + self._decode_new(final=True)",
        "release = self._held",
        "cancelling mid-character drops committed bytes from the reply text",
    ),
    Mutant(
        "detok-last-ignored",
        5,
        "specchat/core/engine.py",
        "text = state.detok.add(token, last=state.stop is not None)",
        "text = state.detok.add(token)",
        "the last token's incomplete bytes are not flushed when the reply stops",
    ),
    Mutant(
        "stop-prefix-shortest-border",
        5,
        "specchat/core/text.py",
        "for k in range(min(len(stop) - 1, len(text)), best, -1):",
        "for k in range(best + 1, min(len(stop) - 1, len(text)) + 1):",
        "the held-back stop-string prefix is the shortest one, not the longest",
    ),
    Mutant(
        "ngram-earliest-match",
        3,
        "specchat/drafters/ngram.py",
        "start = int(hits[-1]) + n",
        "start = int(hits[0]) + n",
        "the n-gram drafter continues the earliest match, not the latest",
    ),
    Mutant(
        "ngram-shortest-first",
        3,
        "specchat/drafters/ngram.py",
        "for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):",
        "for n in range(min_ngram, min(max_ngram, length - 1) + 1):",
        "the n-gram drafter tries the shortest suffix first",
    ),
    Mutant(
        "align-pads-with-zero",
        6,
        "specchat/drafters/model.py",
        'pad = logits.new_full((1, self.target_vocab_size - v), float("-inf"))',
        "pad = logits.new_zeros((1, self.target_vocab_size - v))",
        "a smaller drafter vocab is padded with logit 0 instead of −inf (proposes ids it cannot embed)",
    ),
    Mutant(
        "check-draft-id-bound-off-by-one",
        6,
        "specchat/core/engine.py",
        "int(draft_ids.max()) >= self.vocab_size",
        "int(draft_ids.max()) > self.vocab_size",
        "a draft id equal to the vocab size passes the contract check",
    ),
    Mutant(
        "check-draft-count-off-by-one",
        5,
        "specchat/core/engine.py",
        "        if n > max_draft:\n",
        "        if n > max_draft + 1:\n",
        "a drafter proposing one token too many passes the contract check",
    ),
    Mutant(
        "truncated-round-keeps-accepted",
        10,
        "specchat/core/engine.py",
        "num_accepted, judged = num_committed, judged[:num_committed]",
        "judged = judged[:num_committed]",
        "a round cut by a stop counts accepted drafts past the stop",
    ),
    Mutant(
        "metrics-mean-gamma-counts-empty-rounds",
        10,
        "specchat/core/metrics.py",
        "drafting = [r.num_drafted for r in self.rounds if r.num_drafted]",
        "drafting = [r.num_drafted for r in self.rounds]",
        "the mean γ counts rounds that drafted nothing",
    ),
    Mutant(
        "t1-from-verify-pass-only",
        10,
        "specchat/core/costs.py",
        '        rest_ms = event.round_ms - event.draft_ms\n',
        '        rest_ms = event.verify_ms\n',
        't₁ and v(n) are timed on the verify pass alone, not the whole round (a target-only reply shows a speedup below 1)',
    ),
    Mutant(
        "drafter-reports-zero-steps",
        10,
        "specchat/drafters/model.py",
        "return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), draft_probs, len(tokens), trace)",
        "return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), draft_probs, 0, trace)",
        "a model drafter reports 0 forward steps (c falls back to another formula)",
    ),
    Mutant(
        "tie-tolerance-signed",
        8,
        "specchat/analysis/audit.py",
        "2.0 * torch.finfo(dtype).eps * abs(top_logit)",
        "2.0 * torch.finfo(dtype).eps * top_logit",
        "the tie tolerance uses the signed top logit (negative logits get the floor)",
    ),
    Mutant(
        "audit-sampled-drops-top-k",
        3,
        "specchat/analysis/audit.py",
        "        top_k=config.top_k,\n        top_p=config.top_p,\n        seed=seed,",
        "        top_p=config.top_p,\n        seed=seed,",
        "the audit samples without top-k but compares with the top-k distribution",
    ),
    Mutant(
        "u-shared-across-positions",
        4,
        "specchat/core/sampling.py",
        "u = torch.rand(gamma, generator=generator, device=target_probs.device)",
        "u = torch.rand(gamma, generator=generator, device=target_probs.device)[:1].expand(gamma)",
        "one u is shared by every draft position",
    ),
    Mutant(
        "drafter-cache-outlives-its-generation",
        9,
        "specchat/drafters/model.py",
        "        if not self._kept:\n            self.runtime.release()\n",
        "        pass\n",
        "a drafter's cache is not released when its generation ends unkept (abandoned, failed, prefix cache off)",
    ),
    Mutant(
        "cleanup-not-in-finally",
        9,
        "specchat/core/engine.py",
        "        try:\n            yield from self._generate(prompt_ids, drafter, config, cancel, prefill_progress)\n        finally:\n",
        "        if True:\n            yield from self._generate(prompt_ids, drafter, config, cancel, prefill_progress)\n        if True:\n",
        "cleanup runs only when the generator finishes, not on close or error",
    ),
    Mutant(
        "unembeddable-check-last-only",
        6,
        "specchat/drafters/model.py",
        "        if max(pending) >= self.num_input_ids:\n",
        "        if pending[-1] >= self.num_input_ids:\n",
        "only the last pending id is checked against the drafter's embedding",
    ),
    Mutant(
        "stop-reason-budget-before-eos",
        5,
        "specchat/core/engine.py",
        '        if token in self.eos_token_ids:\n            return StopReason.EOS\n        elif len(state.token_ids) >= config.max_new_tokens:\n            return StopReason.MAX_NEW_TOKENS\n',
        '        if len(state.token_ids) >= config.max_new_tokens:\n            return StopReason.MAX_NEW_TOKENS\n        elif token in self.eos_token_ids:\n            return StopReason.EOS\n',
        "an EOS that is also the last budgeted token is reported as max_new_tokens",
    ),
    Mutant(
        "one-hot-residual-aliases-p",
        4,
        "specchat/core/sampling.py",
        "        residual = target_probs.clone()\n        residual[draft_token_id] = 0.0\n",
        "        residual = target_probs\n        residual[draft_token_id] = 0.0\n",
        "the one-hot residual zeroes p in place (events then report p = 0)",
    ),
    Mutant(
        "sample-without-one-hot-shortcut",
        4,
        "specchat/core/sampling.py",
        "    if float(probs[top]) >= 1.0:\n        return top\n",
        "    if False:\n        return top\n",
        "one-hot rows consume randomness (greedy steps shift the random stream)",
    ),
    Mutant(
        "audit-position-first-drafted",
        3,
        "specchat/analysis/audit.py",
        "        if score >= 0.1:\n            return position\n",
        "        return position\n",
        "the audit samples at the first drafted position even where the draft is nearly always rejected",
    ),
    Mutant(
        "failed-drafter-asked-again",
        9,
        "specchat/core/engine.py",
        "            state.drafter = None\n",
        "            pass\n",
        "after a drafter raised (out of memory), later rounds keep calling it",
    ),
    Mutant(
        "drafter-failure-not-announced",
        9,
        "specchat/core/engine.py",
        "                events.insert(0, state.drafter_failure)\n",
        "                pass\n",
        "the fallback to target-only is silent: no DrafterFailedEvent reaches the user",
    ),
    Mutant(
        "timing-rounds-never-inserted",
        10,
        "specchat/core/costs.py",
        "    if num_target_only < timing_rounds_due(round_index):\n        return True\n",
        "",
        "measure_speedup inserts no target-only round: t₁ is never timed in the run",
    ),
    Mutant(
        "timing-round-still-drafts",
        10,
        "specchat/core/engine.py",
        "                gamma, drafting_paused = (0 if timing else config.num_speculative_tokens), False\n",
        "                gamma, drafting_paused = config.num_speculative_tokens, False\n",
        "a timing round drafts anyway (it times nothing but is labelled a timing round)",
    ),
    Mutant(
        "misses-not-counted-as-timing",
        10,
        "specchat/core/engine.py",
        "            state.num_target_only += 1\n",
        "            pass\n",
        "rounds that drafted nothing anyway do not count: timing rounds are forced on top of lookup misses",
    ),
    Mutant(
        "round-ms-cumulative",
        10,
        "specchat/core/engine.py",
        "round_ms=elapsed_ms - previous_elapsed_ms,",
        "round_ms=elapsed_ms,",
        "a round's time is the decode time so far, not its own share",
    ),
    Mutant(
        "no-drafter-round-charges-draft-time",
        10,
        "specchat/core/engine.py",
        "draft_ms=(t_verify - t_start) * 1000 if asked else 0.0,",
        "draft_ms=(t_verify - t_start) * 1000,",
        "a round that asks no drafter books the engine's work before its verify pass as drafting (t₁ leaves it out)",
    ),
    Mutant(
        "stop-leaves-queued-messages",
        11,
        "specchat/ui/session/queue.py",
        "                self._cancel(ticket, why)\n",
        "                pass\n",
        "Stop ends the reply but a message waiting behind it is sent anyway (the toast says otherwise)",
    ),
    Mutant(
        "stats-of-another-reply",
        11,
        "specchat/ui/session/views.py",
        "return stats_html(reply.metrics, label=reply.label, running=reply.running)",
        "return stats_html(reply.metrics, label=self.replies[0].label, running=reply.running)",
        "the stats line is labeled with the first reply's settings, not the reply it describes",
    ),
    Mutant(
        "view-between-tokens-and-round",
        11,
        "specchat/ui/session/chat.py",
        "drawable = _drawn(item) and (isinstance(item, RoundEvent) or reply.prefill is not None)",
        "drawable = not getattr(item, 'timing_next', False)",
        "the page is redrawn between a round's tokens and its RoundEvent (counts disagree, '1 tokens in 0 rounds')",
    ),
    Mutant(
        "page-update-before-timing-round",
        11,
        "specchat/ui/session/chat.py",
        "return isinstance(item, PrefillEvent) or (isinstance(item, RoundEvent) and not item.timing_next)",
        "return isinstance(item, PrefillEvent) or isinstance(item, RoundEvent)",
        "the page is redrawn just before a timing round, whose target-only step the drawing then slows",
    ),
    Mutant(
        "first-text-waits-an-interval",
        11,
        "specchat/ui/session/chat.py",
        "                if quiet_until is not None or reply.renderer.shows_text:",
        "                if True:",
        "a code reply's first line waits a text interval behind its opening fence (an empty code block shown meanwhile)",
    ),
    Mutant(
        "edited-exchange-drawn-again",
        20,
        "specchat/ui/session/chat.py",
        "settled = self._settled if self._settled and self._settled[0] in self.views.exchanges else None",
        "settled = self._settled",
        "a message sent right after Edit shows the exchange Edit took back again, beside the new one",
    ),
    Mutant(
        "edit-takes-back-any-exchange",
        20,
        "specchat/ui/session/last_reply.py",
        "if last is not None and editing is not None and self._chain(last)[0].id != editing:",
        "if False:",
        "an edited message sent after Regenerate answered meanwhile takes back that newer exchange, not the one edited",
    ),
    Mutant(
        "clear-keeps-queued-messages",
        11,
        "specchat/ui/session/queue.py",
        "                ticket.state = \"discarded\"\n",
        "                pass\n",
        "a message waiting when Clear is pressed still runs on the emptied chat",
    ),
    Mutant(
        "closed-stream-keeps-running",
        11,
        "specchat/ui/session/chat.py",
        "self.stream(turn.history, turn.message, turn.settings.drafter, turn.config, run.cancel, **more)",
        "self.stream(turn.history, turn.message, turn.settings.drafter, turn.config, threading.Event(), **more)",
        "the engine is not given the reply's cancel switch: a closed tab (or Stop) does not stop it",
    ),
    Mutant(
        "conversation-same-seed-every-reply",
        11,
        "specchat/conversation.py",
        "else self.seed + self._asked",
        "else self.seed",
        "every reply of a seeded conversation gets the same seed (sampled turns repeat one another's draws)",
    ),
    Mutant(
        "cleared-turn-kept",
        11,
        "specchat/conversation.py",
        "            if turn._epoch != self._epoch:\n                return False\n",
        "",
        "a reply streaming when Clear is pressed comes back into the emptied conversation",
    ),
    Mutant(
        "reply-stream-sends-the-table",
        11,
        "specchat/ui/session/view.py",
        "    table: str | None = _part(TICKED)\n",
        "    table: str | None = _part(STREAMED)\n",
        "a reply's stream on the page sends the conversation table with every update (Gradio rebuilds it each time)",
    ),
    # -- 12. round traces and the views built on them ----------------------------------------
    Mutant(
        "trace-u-of-the-next-draft",
        12,
        "specchat/core/roundtrace.py",
        "u=float(draws[i]) if i < judged else None,",
        "u=float(draws[min(i + 1, len(draws) - 1)]) if i < judged else None,",
        "each drafted token is recorded with the draw that decided the next one",
    ),
    Mutant(
        "trace-judges-every-draft",
        12,
        "specchat/core/roundtrace.py",
        "judged = min(n, result.num_accepted + 1)",
        "judged = n",
        "drafts after the first rejection are recorded as judged",
    ),
    Mutant(
        "trace-raw-list-is-warped",
        12,
        "specchat/core/roundtrace.py",
        "raw_target = torch.softmax(target_logits.float(), dim=-1)",
        "raw_target = target_probs",
        "the raw target list is the warped p (one-hot at temperature 0)",
    ),
    Mutant(
        "trace-residual-is-p",
        12,
        "specchat/core/roundtrace.py",
        "residual = residual_probs(target_probs[i], q_row, ids[i])",
        "residual = target_probs[i]",
        "the residual shown at a rejection is p, not norm(max(0, p − q))",
    ),
    Mutant(
        "replay-loses-token-text",
        12,
        "specchat/analysis/trace.py",
        'CommittedToken(int(c["token_id"]), str(c["kind"]), str(c["text"]), float(c["p"]),',
        'CommittedToken(int(c["token_id"]), str(c["kind"]), str(c["text"]).strip(), float(c["p"]),',
        "a replayed trace loses the tokens' spaces and newlines",
    ),
    Mutant(
        "inspector-u-against-p",
        12,
        "specchat/ui/html/inspector.py",
        "    r = _ratio(p, q)\n",
        "    r = min(1.0, p)\n",
        "the inspector draws u against p instead of min(1, p/q)",
    ),
    # -- 13. the cost ledger and the exactness proof view ------------------------------------
    Mutant(
        "ledger-verify-positions-miss-one",
        13,
        "specchat/analysis/ledger.py",
        "target_positions=sum(r.num_drafted + 1 for r in rounds),",
        "target_positions=sum(r.num_drafted for r in rounds),",
        "the arithmetic leaves out the extra (bonus) position each verify pass computes",
    ),
    Mutant(
        "ledger-one-target-pass-per-token",
        13,
        "specchat/analysis/ledger.py",
        "target_passes=len(rounds),",
        "target_passes=sum(r.num_committed for r in rounds),",
        "the ledger counts a target pass per committed token, as if nothing were saved",
    ),
    Mutant(
        "ledger-flop-ratio-inverted",
        13,
        "specchat/analysis/ledger.py",
        "self.drafter.matmul_params / self.target.matmul_params",
        "self.target.matmul_params / max(self.drafter.matmul_params, 1)",
        "ĉ is the target's size over the drafter's",
    ),
    Mutant(
        "ledger-prediction-ignores-drafter-work",
        13,
        "specchat/analysis/ledger.py",
        "theory.flop_multiplier(alpha, r.num_drafted, flop_ratio or 0.0)",
        "theory.flop_multiplier(alpha, r.num_drafted, 0.0)",
        "the predicted arithmetic leaves out the drafter's γĉ",
    ),
    Mutant(
        "model-size-counts-packed-int4",
        13,
        "specchat/runtimes/transformers.py",
        "for dim in (shape if shape is not None else tensor.shape):",
        "for dim in tensor.shape:",
        "a 4-bit weight counts its packed bytes as parameters (ĉ of the int4 copy reads 1/8)",
    ),
    Mutant(
        "model-size-counts-tied-twice",
        13,
        "specchat/runtimes/transformers.py",
        "if tensor is None or id(tensor) in seen:",
        "if tensor is None:",
        "a weight shared by two layers (a tied head) is counted twice",
    ),
    Mutant(
        "proof-beta-is-the-product",
        13,
        "specchat/core/roundtrace.py",
        "overlap = torch.minimum(p, q)",
        "overlap = p * q",
        "β is recorded as Σ p·q instead of Σ min(p, q)",
    ),
    Mutant(
        "proof-residual-path-not-scaled",
        13,
        "specchat/ui/html/proof.py",
        "    scale = 1.0 - proof.beta\n",
        "    scale = 1.0\n",
        "the proof view's residual path is p′ instead of (1 − β)·p′",
    ),
    Mutant(
        "ledger-drafted-tokens-cost-drafter-arithmetic",
        13,
        "specchat/analysis/ledger.py",
        "return self.target_positions + self.flop_ratio * self.drafter_passes",
        "return self.target_positions + self.flop_ratio * self.num_drafted",
        "a lookup round's drafts are charged drafter arithmetic as if a model had drafted them",
    ),
    # -- 14. the hybrid drafter and the drafter picked by measurement ------------------------
    Mutant(
        "hybrid-lookup-q-is-the-models",
        14,
        "specchat/drafters/hybrid.py",
        "            return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device), None, 0, trace)",
        "            model = self.model_drafter.propose(ids, len(tokens), config, generator)\n"
        "            return Draft(torch.tensor(tokens, dtype=torch.long, device=self.device)[: len(model.token_ids)], "
        "model.draft_probs, 0, trace)",
        "a lookup round reports the model's q for the copied tokens instead of one-hot",
    ),
    Mutant(
        "hybrid-latest-not-most-frequent",
        14,
        "specchat/drafters/hybrid.py",
        "best = values[counts == counts.max()]",
        "best = values",
        "the lookup copies the latest continuation, not the one seen most often",
    ),
    Mutant(
        "hybrid-short-matches-allowed",
        14,
        "specchat/drafters/hybrid.py",
        "for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):",
        "for n in range(min(max_ngram, length - 1), 0, -1):",
        "matches shorter than min_match make lookup rounds",
    ),
    Mutant(
        "hybrid-one-lookup-controller",
        14,
        "specchat/drafters/hybrid.py",
        'return "lookup-long" if match_len >= self.long_match else "lookup-short"',
        'return "lookup-long"',
        "lookups after short and long matches share one adaptive-γ controller",
    ),
    Mutant(
        "calibration-against-one-baseline",
        14,
        "specchat/analysis/calibrate.py",
        "rate / statistics.mean(base_rates[-2:])",
        "rate / base_rates[0]",
        "every drafter is compared with the first target-only reply, not the two around it",
    ),
    Mutant(
        "calibration-key-ignores-models",
        14,
        "specchat/analysis/calibrate.py",
        '        "models_hash": digest,\n',
        "",
        "a record for another model pair is taken for this one",
    ),
    Mutant(
        "calibration-picks-slowest",
        14,
        "specchat/analysis/calibrate.py",
        "return max(self.drafters, key=lambda d: d.speedup, default=None)",
        "return min(self.drafters, key=lambda d: d.speedup, default=None)",
        "the pick goes to the slowest model drafter",
    ),
    Mutant(
        "compiled-padding-not-cut",
        14,
        "specchat/runtimes/compiled.py",
        "            self.cache.crop(n - bucket)",
        "            pass",
        "a padded pass leaves its padding's states in the static cache as if they were real",
    ),
    Mutant(
        "compiled-logits-of-the-padding",
        14,
        "specchat/runtimes/compiled.py",
        "        logits = out.logits[0, :n]",
        "        logits = out.logits[0, -n:]",
        "a padded pass returns the logits of its last n positions (the padding's) instead of the first n",
    ),
    Mutant(
        "compiled-kept-cache-of-the-wrong-kind",
        14,
        "specchat/runtimes/transformers.py",
        "            cache = None  # kept on the other kind of cache than this generation runs on",
        "            pass",
        "a prefix kept on a dynamic cache is reused by a generation on the static cache (or the reverse)",
    ),
    # -- 15. the app on ZeroGPU (a reply in a forked worker) ----------------------------------
    Mutant(
        "zerogpu-stop-not-forwarded",
        15,
        "specchat/ui/page/zerogpu.py",
        "            if cancel is not None and cancel.is_set():\n                slot.cancel(generation)\n"
        "            yield from_plain(data, types)\n",
        "            yield from_plain(data, types)\n",
        "the page's Stop is never passed to the forked worker: it generates the whole reply",
    ),
    Mutant(
        "zerogpu-closed-reader-not-forwarded",
        15,
        "specchat/ui/page/zerogpu.py",
        "        if not finished:  # stopped reading early: tell the worker first, then let go of its stream\n"
        "            slot.cancel(generation)\n",
        "        pass\n",
        "a reader that goes away (a closed tab) leaves the forked worker generating to the end",
    ),
    Mutant(
        "zerogpu-tuples-cross-as-lists",
        15,
        "specchat/ui/page/zerogpu.py",
        '        return {"__tuple__": [to_plain(x) for x in obj]}\n',
        "        return [to_plain(x) for x in obj]\n",
        "tuples cross the worker boundary as lists: the events that come back differ from the ones sent",
    ),
    # -- 16. the llama.cpp runtime ----------------------------------------------------------
    Mutant(
        "llamacpp-rollback-one-short",
        16,
        "specchat/runtimes/llamacpp.py",
        "        if not self._remove_from(num_positions):\n",
        "        if not self._remove_from(num_positions + 1):\n",
        "a rollback removes one position too few from llama.cpp's KV cache (the first rejected draft stays)",
    ),
    Mutant(
        "llamacpp-logits-of-the-wrong-position",
        16,
        "specchat/runtimes/llamacpp.py",
        "shape=(scored, self.vocab_size)).copy())",
        "shape=(scored, self.vocab_size))[::-1].copy())",
        "a verify pass's logits rows come back in the wrong order (row j scores another position than token j's)",
    ),
    Mutant(
        "llamacpp-stale-prefix",
        16,
        "specchat/runtimes/llamacpp.py",
        "        n = common_prefix(self._ids, prefix_ids) if reuse and self._started else 0\n",
        "        n = min(len(self._ids), len(prefix_ids) - 1) if reuse and self._started else 0\n",
        "start() keeps cached states without comparing their ids with the new prompt (a stale prefix)",
    ),
    # -- 17. adaptive γ's pause ---------------------------------------------------------------
    Mutant(
        "losing-drafter-never-pauses",
        17,
        "specchat/core/adaptive.py",
        "        elif best_s >= 1.0:\n",
        "        elif best_s >= 0.0:\n",
        "a drafter predicted to lose keeps drafting (adaptive γ never answers 0)",
    ),
    Mutant(
        "probes-ignore-the-budget",
        17,
        "specchat/core/adaptive.py",
        "        return max(2, math.ceil(loss / PROBE_BUDGET + 1.0 - expected[num_speculative_tokens - 1] - 1e-9))\n",
        "        return 2\n",
        "a paused drafter probes every other round, whatever the probes cost",
    ),
    Mutant(
        "probe-counts-its-catch-up-as-drafting",
        17,
        "specchat/core/adaptive.py",
        "        self.costs.add(event, source=self.source, draft=not catching_up)\n",
        "        self.costs.add(event, source=self.source)\n",
        "a probe's drafting time, which includes catching up on the paused rounds, inflates c",
    ),
    Mutant(
        "catch-up-unpriced-until-timed",
        17,
        "specchat/core/adaptive.py",
        "        return self.catch_up_prior_ms / t1 if self.catch_up_prior_ms and t1 else 0.0\n",
        "        return 0.0\n",
        "a paused model drafter's first probes ignore its catch-up (priced from its prompt-reading rate)",
    ),
    Mutant(
        "pause-after-drafting-probes-at-once",
        17,
        "specchat/core/adaptive.py",
        "        if not self.paused and self._drafted_in_reply:",
        "        if False:",
        "a pause that starts right after the reply's own drafting rounds probes at once",
    ),
    Mutant(
        "new-lookup-source-drafts-on-the-prior",
        17,
        "specchat/core/adaptive.py",
        "                                                                paused=free)",
        "                                                                paused=False)",
        "a new lookup source drafts on the prior instead of being judged for free first",
    ),
    Mutant(
        "verify-cost-curve-counts-drafting",
        10,
        "specchat/core/metrics.py",
        "sums.setdefault(r.num_drafted + 1, []).append((r.round_ms - r.draft_ms) / t1)",
        "sums.setdefault(r.num_drafted + 1, []).append(r.round_ms / t1)",
        "the verify-cost curve T(k)/T(1) on the theory chart includes the drafting time",
    ),
    # -- 18. token kinds ----------------------------------------------------------------------
    Mutant(
        "empty-draft-token-called-bonus",
        18,
        "specchat/core/sampling.py",
        "        return VerifyResult(0, (), sample(target_probs[0], generator), TokenKind.TARGET)\n",
        "        return VerifyResult(0, (), sample(target_probs[0], generator), TokenKind.BONUS)\n",
        "a round that drafted nothing calls its token a bonus, as if the drafter had been right",
    ),
    Mutant(
        "full-acceptance-called-target",
        18,
        "specchat/core/sampling.py",
        "        return VerifyResult(gamma, mask, sample(target_probs[gamma], generator), TokenKind.BONUS, u)\n",
        "        return VerifyResult(gamma, mask, sample(target_probs[gamma], generator), TokenKind.TARGET, u)\n",
        "the extra token after a full acceptance is called a target token: the bonus is never shown",
    ),
    Mutant(
        "old-trace-keeps-bonus",
        18,
        "specchat/analysis/trace.py",
        "    if r.get(\"drafted\"):\n        return r\n",
        "    return r\n",
        "a version-1 trace opens with its no-draft tokens still called bonus",
    ),
    Mutant(
        "page-counts-target-as-bonus",
        18,
        "specchat/ui/html/render.py",
        "{counts[\"bonus\"]} bonus",
        "{counts[\"bonus\"] + counts[\"target\"]} bonus",
        "the reply summary counts the target's own tokens as bonus tokens",
    ),
    Mutant(
        "audit-counts-target-as-drafted",
        18,
        "specchat/analysis/audit.py",
        "        num_drafted += done.kinds[0] in (TokenKind.ACCEPTED, TokenKind.RESAMPLED)\n",
        "        num_drafted += 1\n",
        "the sampled audit counts draws of target-only rounds as drafted, overstating what it checked",
    ),
    Mutant(
        "verify-cost-ignores-one-at-one-position",
        17,
        "specchat/core/round_costs.py",
        "                value_n = 1.0 + (bottom - 1.0) * (n - 1) / (lo - 1)\n",
        "                value_n = bottom\n",
        "below the smallest n measured the verify cost ignores (1, 1): a pass over 2 positions priced as one over 5",
    ),
    Mutant(
        "probe-at-the-best-gamma",
        17,
        "specchat/core/adaptive.py",
        "        probe = self.probe_gamma(curves)\n",
        "        probe = best\n",
        "a probe drafts the γ with the best S, not the one that loses least while paused",
    ),
    Mutant(
        "warm-up-rounds-fitted",
        17,
        "specchat/core/round_costs.py",
        "        if self._skip > 0:\n",
        "        if False:\n",
        "a fresh cost model counts the slow first rounds (an inflated ρ(n) can keep drafting paused)",
    ),
    Mutant(
        "reply-probe-charged-as-catch-up",
        17,
        "specchat/core/adaptive.py",
        "        catching_up = self._probing and not self._reply_probe\n",
        "        catching_up = self._probing\n",
        "a reply's first probe (nothing to catch up) resets the catch-up charged to the probe interval",
    ),
    Mutant(
        "controller-never-times-t1",
        17,
        "specchat/core/adaptive.py",
        "            if timed_drafting and not self.costs.num_target_steps and self._num_replies and not self._asked_target_step:\n",
        "            if False:\n",
        "without timing rounds adaptive γ never times t₁, so a losing drafter can never pause",
    ),
    Mutant(
        "paused-controller-skips-its-probes",
        17,
        "specchat/core/adaptive.py",
        "        self._skip = interval - self._since_probe - 1\n",
        "        self._skip = 1 << 30\n",
        "a paused controller answers 0 without re-deciding past the round its probe was due: α is never measured again",
    ),
    Mutant(
        "fresh-controller-starts-at-four",
        17,
        "specchat/core/adaptive.py",
        "    initial_num_speculative_tokens: int = 1\n",
        "    initial_num_speculative_tokens: int = 4\n",
        "a fresh controller's first rounds draft γ = 4 (on a CPU a 5-position pass can cost 4 target steps)",
    ),
    Mutant(
        "no-exploration-above-the-measured",
        17,
        "specchat/core/round_costs.py",
        "                value_n = top + min(slope, EXPLORE_SLOPE) + slope * (n - hi - 1)\n",
        "                value_n = top + slope * (n - hi)\n",
        "the next γ up is priced by the line through (1, 1): with llama.cpp's costs a copy is drafted one token a round",
    ),
    Mutant(
        "a-pause-ends-on-a-lucky-streak",
        17,
        "specchat/core/adaptive.py",
        "            resume, resume_s = self._best(self._curves(cautious=True))\n",
        "            resume, resume_s = self._best(self._curves())\n",
        "a paused controller drafts again on its point estimate: a short streak in text that seldom repeats restarts drafting",
    ),
    Mutant(
        "free-source-probes",
        17,
        "specchat/core/adaptive.py",
        "        if self.free:  # judged for free in every paused round (observe): no probe needed\n",
        "        if False:  # judged for free in every paused round (observe): no probe needed\n",
        "a paused lookup probes as a model drafter does, though every round judges its draft for free",
    ),
    Mutant(
        "free-draft-judged-at-its-first-token-only",
        17,
        "specchat/core/adaptive.py",
        "                if right and position + 1 < len(tokens):\n",
        "                if False:\n",
        "a free draft's second and later tokens are never judged: their acceptance is guessed from the first's",
    ),
    Mutant(
        "costs-in-milliseconds-across-moments",
        17,
        "specchat/core/round_costs.py",
        "            t1 = self.step_near(seq)\n",
        "            t1 = self.target_step_ms\n",
        "every drafting round is divided by the latest t₁, not the target steps timed next to it: a busy moment's ratios are wrong",
    ),
    Mutant(
        "cost-means-not-medians",
        17,
        "specchat/core/round_costs.py",
        "                    points.append((n, statistics.median(ratios), len(ratios)))\n",
        "                    points.append((n, statistics.mean(ratios), len(ratios)))\n",
        "the verify cost is the mean of its samples: one round slowed by a busy moment moves it",
    ),
    Mutant(
        "history-is-the-truth",
        17,
        "specchat/core/adaptive.py",
        "        if self._reached[0] > HISTORY_WEIGHT:\n",
        "        if False:\n",
        "earlier replies' acceptance is kept whole at a reply's start: an open chat's α keeps a code edit paused",
    ),
    Mutant(
        "own-rounds-never-replace-history",
        17,
        "specchat/core/round_costs.py",
        "        return own >= OWN_SAMPLES and bool(self._steps)\n",
        "        return False\n",
        "a reply's own rounds never replace the earlier replies' costs: a busy reply's steep costs linger",
    ),
    Mutant(
        "free-evidence-ignored",
        17,
        "specchat/core/adaptive.py",
        "            controller.observe(positions)\n",
        "            pass\n",
        "a paused lookup is never judged on what it would have proposed: it waits for probes",
    ),
    Mutant(
        "a-lone-probe-is-ignored",
        17,
        "specchat/core/adaptive.py",
        "                self._skip, self._since_probe = 0, CONFIRM\n",
        "                pass\n",
        "a probe that alone says drafting pays waits a whole probe interval for the next",
    ),
    Mutant(
        "one-controller-for-every-match-length",
        17,
        "specchat/drafters/ngram.py",
        '        return "miss" if match_len is None else f"match-{match_len}"\n',
        '        return ""\n',
        "prompt lookup after a 1-token match and after a 3-token match share one acceptance estimate",
    ),
    # -- 19. a long prefill, a queued message, a reload ------------------------------------
    Mutant(
        "stopped-prefill-forgets-what-was-read",
        19,
        "specchat/core/engine.py",
        "            self._finished = (prompt_ids[: self.target.num_cached + 1], False)\n",
        "            self._finished = None\n",
        "a Stop while the prompt is read drops the conversation's whole cache: the next message reads it all again",
    ),
    Mutant(
        "prefill-ignores-stop",
        19,
        "specchat/core/prefill.py",
        "            if cancel is not None and cancel.is_set():\n                steps.close()\n",
        "            if False:\n                steps.close()\n",
        "Stop during a prefill waits for the whole prompt to be read",
    ),
    Mutant(
        "prefill-pass-drops-its-last-token",
        19,
        "specchat/core/prefill.py",
        "        runtime.forward(chunk, num_logits=0)\n",
        "        runtime.forward(chunk[:-1] or chunk, num_logits=0)\n",
        "each forward pass of a long prefill leaves its last token out of the cache",
    ),
    Mutant(
        "unqueue-cancels-the-first",
        19,
        "specchat/ui/session/queue.py",
        "            ticket = next((t for t in self.tickets if t.exchange is not None and t.exchange.id == exchange_id), None)\n",
        "            ticket = next((t for t in self.tickets if t.exchange is not None), None)\n",
        "a queued message's cancel button withdraws the first queued message, not its own",
    ),
    Mutant(
        "queued-taken-by-text",
        19,
        "specchat/ui/session/queue.py",
        "ticket = next((t for t in self.tickets if t.id == ticket_id), None)",
        "ticket = next((t for t in self.tickets if t.message == message), None)",
        "a reply takes the first waiting message with its text, not its own: it runs in another bubble",
    ),
    Mutant(
        "stopped-prefill-kept-in-history",
        19,
        "specchat/conversation.py",
        "        return ended or self.num_tokens > 0\n",
        "        return not self.failed\n",
        "a message stopped while it was read (nothing answered) stays in what the model sees",
    ),
    Mutant(
        "restore-trusts-roles",
        19,
        "specchat/ui/session/saved.py",
        "        if not isinstance(m, dict) or m.get(\"role\") not in (\"user\", \"assistant\") or not isinstance(m.get(\"content\"), str):\n",
        "        if not isinstance(m, dict) or not isinstance(m.get(\"content\"), str):\n",
        "a conversation restored from the browser may carry any role (a system message the user never set)",
    ),
    # -- 20. the last reply, several chats, the settings kept --------------------------------
    Mutant(
        "continued-reply-lost-when-unanswered",
        20,
        "specchat/conversation.py",
        "                if before is not None:  # the continued reply goes back as it was\n",
        "                if False:  # the continued reply goes back as it was\n",
        "a Continue stopped before its first token loses the reply it was to continue from the history",
    ),
    Mutant(
        "continuation-drops-the-first-part",
        20,
        "specchat/conversation.py",
        "            text = (before or \"\") + turn.text\n",
        "            text = turn.text\n",
        "a continued reply keeps only the new text: what it continued is gone from the history",
    ),
    Mutant(
        "take-back-keeps-the-turn",
        20,
        "specchat/conversation.py",
        "            del self.messages[-2:]\n            return dict(user)\n",
        "            return dict(user)\n",
        "Regenerate and Edit leave the old exchange in what the model sees (it answers it twice)",
    ),
    Mutant(
        "undo-after-delete-forgets-the-chat",
        20,
        "specchat/ui/session/chats.py",
        "        if gone.saved.get(\"exchanges\") or gone.renamed:",
        "        if False:",
        "Undo after Delete brings nothing back",
    ),
    Mutant(
        "new-chat-keeps-the-last-chats-prompt",
        20,
        "specchat/ui/session/chat.py",
        "            self.conversation.system_prompt = \"\"  # the chat's own (its copy's), not the last chat's\n",
        "",
        "a new chat answers with the system prompt the last chat sent, whatever its box says",
    ),
    Mutant(
        "continue-below-a-cancelled-message",
        20,
        "specchat/ui/session/last_reply.py",
        "            moved = tuple(self.views.move_to_end(e) for e in unanswered)\n",
        "            moved = ()\n",
        "a Continue is shown below a message Stop cancelled, as if it answered it",
    ),
    Mutant(
        "kept-gamma-may-be-fractional",
        20,
        "specchat/ui/session/saved.py",
        "                ok = value == int(value)  # type: ignore[arg-type]  # a number, checked above\n",
        "                ok = True\n",
        "a fractional γ or max new tokens kept by the browser comes back into the page",
    ),
    Mutant(
        "reload-forgets-the-closed-tabs-copy",
        20,
        "specchat/ui/session/store.py",
        "        if dropped is not None and time.monotonic() - dropped[0] < DROPPED_KEPT_S:\n",
        "        if False:\n",
        "a page reloaded mid-reply restores the browser's copy, up to a save interval older than what the tab held",
    ),
    Mutant(
        "switched-chat-loses-its-replies",
        20,
        "specchat/ui/session/chat.py",
        "            kept = next((k for k in self._set_aside if k[0] is copy), None)\n",
        "            kept = None\n",
        "a chat shown again in the same tab comes back as restored text: its colours, charts and inspector gone",
    ),
    Mutant(
        "continuation-outside-its-code-block",
        20,
        "specchat/ui/session/chat.py",
        "            reply.renderer.continue_inside(continuation_lead(prefix))\n",
        "            pass\n",
        "a Continue of a reply cut inside a code block renders its code as plain text",
    ),
    Mutant(
        "continuation-without-the-line-it-picks-up",
        20,
        "specchat/ui/html/markdown.py",
        "    if not fence and not _STRUCTURED_LINE.match(tail):\n",
        "    if True:\n",
        "a Continue of a reply cut inside a numbered list renders its items as a paragraph",
    ),
    Mutant(
        "commas-without-a-break",
        20,
        "specchat/ui/html/markdown.py",
        "    if wraps:\n        text = text.replace(\",\", \",<wbr>\")\n",
        "    pass\n",
        "a run of numbers separated by commas wraps mid-number",
    ),
    # -- 21. a streaming reply's live channel ------------------------------------------------------
    Mutant(
        "live-channel-without-a-reader",
        21,
        "specchat/ui/session/live.py",
        "        if self._readers:\n            self.publish(value)\n",
        "        if True:\n            self.publish(value)\n",
        "a page that does not read the live channel (no script, a 404) gets no streaming text at all",
    ),
    Mutant(
        "live-unsent-value-dropped",
        21,
        "specchat/ui/session/live.py",
        "            if self._value is not None and self._version > self._taken:\n",
        "            if False:\n",
        "a value the reader has not taken is replaced, not folded: a queued message shown once is lost behind the next round",
    ),
    Mutant(
        "live-reader-never-leaves",
        21,
        "specchat/ui/page/live.py",
        "    finally:\n        channel.detach()\n",
        "    finally:\n        pass\n",
        "a page whose live stream ended still counts as reading: its updates never go back to Gradio",
    ),
    Mutant(
        "reply-end-sent-only-live",
        21,
        "specchat/ui/page/handlers.py",
        "if view.streaming and transcript in out:",
        "if transcript in out:",
        "the reply's start and end go to the live channel too: a page whose stream ended early never gets the end",
    ),
]


def copy_tree(dest: Path) -> None:
    """Copy the files git knows (tracked, or untracked and not ignored) to ``dest``."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _pattern(old: str) -> tuple[re.Pattern, int | None]:
    """A regex for ``old`` whatever its indentation, and the index of the line whose
    indentation sets the base (None for a one-line inline snippet).

    A snippet that starts with whitespace or ends with a newline is made of whole lines; its
    first line's indentation is the base. An inline snippet (starting mid-line) has its second
    line as the base. Later lines keep their indentation relative to the base."""
    lines = old.split("\n")
    whole = old[:1] in (" ", "\t") or old.endswith("\n")
    base_index = 0 if whole else (1 if len(lines) > 1 else None)
    parts = []
    for i, line in enumerate(lines):
        if base_index is None or i < base_index or (i == len(lines) - 1 and not line):
            parts.append(re.escape(line))  # (the empty rest after a final newline stays empty)
        elif not line.strip():
            parts.append(r"[ \t]*")
        elif i == base_index:
            parts.append(r"(?P<base>[ \t]*)" + re.escape(line.lstrip(" \t")))
        else:
            extra = len(_indent(line)) - len(_indent(lines[base_index]))
            parts.append(r"(?P=base)" + (" " * extra if extra > 0 else "") + re.escape(line.lstrip(" \t")))
    prefix = "(?m)^" if whole else ""
    return re.compile(prefix + "\n".join(parts)), base_index


def locate(text: str, old: str) -> list[re.Match]:
    """Every occurrence of the snippet ``old`` in ``text``, anchored by its text, not by its
    indentation (see :func:`_pattern`)."""
    pattern, _ = _pattern(old)
    return list(pattern.finditer(text))


def mutate(text: str, old: str, new: str) -> str:
    """``text`` with its one occurrence of ``old`` replaced by ``new``, re-indented by as much
    as the code moved.

    Raises:
        ValueError: ``old`` does not occur exactly once.
    """
    matches = locate(text, old)
    if len(matches) != 1:
        raise ValueError(f"the snippet occurs {len(matches)} times")
    match = matches[0]
    _, base_index = _pattern(old)
    if base_index is not None:
        delta = len(match.group("base")) - len(_indent(old.split("\n")[base_index]))
        first = 0 if base_index == 0 else 1
        lines = new.split("\n")
        for i in range(first, len(lines)):
            if lines[i].strip():
                width = max(0, len(_indent(lines[i])) + delta)
                lines[i] = " " * width + lines[i].lstrip(" \t")
        new = "\n".join(lines)
    return text[: match.start()] + new + text[match.end() :]


def apply(mutant: Mutant, tree: Path) -> None:
    path = tree / mutant.path
    try:
        path.write_text(mutate(path.read_text(), mutant.old, mutant.new))
    except ValueError as exc:
        raise SystemExit(f"mutant {mutant.name}: {exc} in {mutant.path}; update scripts/mutants.py") from None


def run_tests(tree: Path, tests: list[str], timeout: int) -> tuple[bool, str, float]:
    """(passed, first failing test or '', seconds)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-rfE", *tests]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timeout after {timeout} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if out.returncode == 0:
        return True, "", seconds
    first = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", out.stdout, re.M)
    return False, first.group(1) if first else f"pytest exit {out.returncode}", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per pytest run (default 900)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.only and len(chosen) != len(set(args.only)):
        known = {m.name for m in MUTANTS}
        parser.error(f"unknown mutant(s): {', '.join(sorted(set(args.only) - known))}")
    if args.list:
        for m in chosen:
            print(f"{m.kind}  {m.name:32} {m.path:28} {m.what}")
        return 0

    with tempfile.TemporaryDirectory(prefix="specchat-mutants-") as tmp:
        clean = Path(tmp) / "clean"
        copy_tree(clean)
        families = sorted({t for m in chosen for t in m.tests})
        ok, first, seconds = run_tests(clean, families, args.timeout)
        print(f"unmutated: {'pass' if ok else 'FAIL ' + first} ({seconds:.0f} s, {len(families)} files)", flush=True)
        if not ok:
            return 2
        rows = []
        for m in chosen:
            tree = Path(tmp) / m.name
            shutil.copytree(clean, tree)
            apply(m, tree)
            passed, first, seconds = run_tests(tree, m.tests, args.timeout)
            shutil.rmtree(tree, ignore_errors=True)
            rows.append((m, passed, first, seconds))
            print(f"{m.kind}  {m.name:32} {'SURVIVED' if passed else 'killed'}  {first}  ({seconds:.0f} s)", flush=True)

    killed = sum(not passed for _, passed, _, _ in rows)
    print(f"\n{killed} of {len(rows)} mutants killed")
    if args.markdown:
        print("\n| kind | mutant (deliberate breakage) | result | first failing test |")
        print("|---|---|---|---|")
        for m, passed, first, _ in rows:
            print(f"| {m.kind} | `{m.name}`: {m.what} | {'**survived**' if passed else 'killed'} | `{first}` |")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
