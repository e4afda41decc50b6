"""``specchat audit``: check on real models that speculation does not change the output: a
greedy comparison with target-only (a divergence passes only at a near-tie of the target's top
two logits) and a chi-square test of sampled draws at one reply position. The checks are
:mod:`specchat.analysis.audit`'s; the exit status is 0 only when both pass."""

from __future__ import annotations

import argparse

from specchat.commands.common import fail, load_service
from specchat.core.config import MAX_NEW_TOKENS_LIMIT, MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE, GenerationConfig
from specchat.drafters.kinds import SPECULATIVE_KIND_NAMES
from specchat.options import DEVICE_HELP, DTYPE_CHOICES, add_models_argument, add_runtime_argument, auto_or, device, ranged

_gamma = ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}")
AUDIT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def add_parser(subparsers) -> argparse.ArgumentParser:
    aud = subparsers.add_parser("audit", help="check on real models that speculation does not change the output")
    aud.add_argument("--target", help="models.yaml name or local Hugging Face-format directory (default: models.yaml default)")
    aud.add_argument("--drafter", choices=SPECULATIVE_KIND_NAMES, required=True)
    aud.add_argument("--drafter-model", help="sibling drafter: models.yaml name or local directory")
    aud.add_argument("--prompt", default=AUDIT_PROMPT, help="chat message to audit on")
    aud.add_argument("--samples", type=ranged(int, 10, 100000, "an integer in 10..100000"), default=300,
                     help="sampled draws of the next token at the chosen position (default 300)")
    last = MAX_NEW_TOKENS_LIMIT - 1
    aud.add_argument("--position", type=auto_or(ranged(int, 0, last, f"'auto' or an integer in 0..{last}")),
                     default="auto",
                     help="reply position of the sampled check: 0 = the first reply token, or 'auto' (default): "
                          "the greedy reply's most uncertain position where the drafter proposes a token")
    aud.add_argument("--max-new-tokens", type=ranged(int, 1, MAX_NEW_TOKENS_LIMIT, f"1..{MAX_NEW_TOKENS_LIMIT}"), default=64,
                     help="length of the greedy comparison (default 64)")
    aud.add_argument("--num-speculative-tokens", "-k", type=_gamma, default=4)
    aud.add_argument("--temperature", type=ranged(float, 0.0, MAX_TEMPERATURE, f"0 < T <= {MAX_TEMPERATURE}", lo_open=True), default=1.0,
                     help="temperature of the sampled check (default 1.0)")
    aud.add_argument("--top-k", type=ranged(int, 0, None, "an integer >= 0 (0 = off)"), default=0)
    aud.add_argument("--top-p", type=ranged(float, 0.0, 1.0, "0 < P <= 1", lo_open=True), default=1.0)
    aud.add_argument("--seed", type=ranged(int, 0, 2**63 - 1, "0..2^63-1"), default=0)
    aud.add_argument("--significance", type=ranged(float, 0.0, 0.5, "0 < A <= 0.5", lo_open=True), default=1e-3,
                     help="the sampled check fails when p < this (default 0.001: a correct engine fails 0.1%% of audits)")
    aud.add_argument("--tie-tolerance", type=auto_or(ranged(float, 0.0, None, "'auto' or a number >= 0")), default="auto",
                     help="a greedy divergence passes only where the target's top-2 logit gap is at most this "
                          "(default auto: 2 machine epsilons of the model's dtype at the top logit, at least 0.001)")
    aud.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    add_runtime_argument(aud, threads=True)
    aud.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    add_models_argument(aud)
    return aud


def run(args: argparse.Namespace) -> int:
    from specchat.analysis import audit
    from specchat.errors import SpecchatError

    try:
        service, status = load_service(args)
        if service is None:
            return status
        ids, _ = service.encode_chat([], args.prompt, args.max_new_tokens)
        tok = service.tokenizer
        print(f"audit: target {service.target_name} ({service.dtype}), drafter {args.drafter}, γ={args.num_speculative_tokens}")

        reference, other, div = audit.greedy_check(service, ids, args.drafter, args.max_new_tokens, args.num_speculative_tokens)
        if div is None:
            greedy_ok = True
            print(f"[1/2] greedy, {len(reference)} tokens: identical to target-only  PASS")
        else:
            tolerance = args.tie_tolerance
            if tolerance == "auto":
                tolerance = audit.tie_tolerance(service.dtype, div.top_logits[0])
            greedy_ok = div.is_near_tie(tolerance)
            print(
                f"[1/2] greedy, {len(reference)} tokens: first divergence at generated token {div.index}: "
                f"target-only {tok.decode([div.target_only_token])!r} ({div.target_only_token}) vs speculative "
                f"{tok.decode([div.speculative_token])!r} ({div.speculative_token}); target's top-2 logits there "
                f"{div.top_logits[0]:.4f} / {div.top_logits[1]:.4f}, gap {div.gap:.4f} "
                + ("<= " if greedy_ok else "> ")
                + f"tie tolerance {tolerance:.4g}  {'PASS (near-tie)' if greedy_ok else 'FAIL'}"
            )

        config = GenerationConfig(
            num_speculative_tokens=args.num_speculative_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        )
        if args.position == "auto":
            position = audit.choose_position(service, ids, reference, args.drafter, config)
        elif args.position < len(reference):
            position = args.position
        else:
            return fail(f"--position {args.position} is past the greedy reply's "
                        f"{len(reference)} tokens; allowed: 0..{len(reference) - 1} or auto")
        context = tok.decode(reference[max(0, position - 8) : position])
        check = audit.sampled_check(service, ids + reference[:position], args.drafter, args.samples, config, progress=True)
        sampled_ok = check.p_value >= args.significance and check.outside_support == 0
        print(
            f"[2/2] sampled, {check.num_samples} draws of reply token {position} (after …{context!r}; "
            f"T={args.temperature}, top-k={args.top_k}, top-p={args.top_p}): chi-square {check.statistic:.2f}, "
            f"dof {check.dof}, p-value {check.p_value:.4f}, drafted in {check.num_drafted} of {check.num_samples} "
            f"draws ({check.num_accepted} accepted, {check.num_drafted - check.num_accepted} resampled, "
            f"{check.num_samples - check.num_drafted} target), "
            f"outside the target's support {check.outside_support}  "
            f"{'PASS' if sampled_ok else 'FAIL'} (fails when p < {args.significance})"
        )
        if check.num_drafted == 0:
            print("      note: the drafter proposed nothing at this position, so only target-only sampling was "
                  "checked; try --position or a prompt the drafter can match")
        print(f"      {'token':>24}  {'exact p':>8}  {'observed':>8}  {'expected':>8}")
        for token, prob, count in check.rows:
            print(f"      {tok.decode([token])!r:>24}  {prob:8.4f}  {count:8d}  {prob * check.num_samples:8.1f}")
    except (SpecchatError, ValueError) as exc:
        return fail(str(exc), 1)
    return 0 if greedy_ok and sampled_ok else 1


