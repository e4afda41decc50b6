"""The one table of drafter kinds: the registry, the service, the app, the CLI, the charts and
the README's table all read it. A new kind is one drafter module plus one row here.

Pure Python and fast to import (no torch): ``app.py --help`` and the CLI's argument parser
read it before any model library is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter.

    Attributes:
        name: the key used everywhere (``--drafter``, models.yaml, the dropdown, JSON output).
        short: a few words for the dropdown's hint ("4-bit copy").
        description: one line: what proposes the tokens.
        draft_probs: what q (``draft_probs``) is for this kind, in words.
        needs: what it needs beyond the target ("" for nothing).
        source: how it is built: ``"none"`` (no drafter: target-only decoding), ``"lookup"``
            (n-gram lookup over the context, no model), ``"target"`` (the target's own
            weights), ``"sibling"`` (the target's registered sibling model) or ``"hybrid"``
            (lookup first, then the fastest model drafter of the target).
        int4: the model is quantized to bitsandbytes NF4 while loading.
        color: its color in charts (hex).
    """

    name: str
    short: str
    description: str
    draft_probs: str
    needs: str
    source: str
    int4: bool
    color: str

    @property
    def needs_sibling(self) -> bool:
        """True when the target's models.yaml entry must name a sibling."""
        return self.source == "sibling"

    @property
    def own_model(self) -> bool:
        """True for a drafter that is a model of its own (int4, sibling, sibling-int4): what the
        calibration times, the hybrid falls back on, and transformers can take as assistant."""
        return self.source in ("target", "sibling")

    @property
    def is_model(self) -> bool:
        """True for a drafter that runs a model (its steps cost time; c > 0): one with a model of
        its own, or the hybrid, whose model rounds do."""
        return self.own_model or self.source == "hybrid"


_MODEL_Q = "drafter softmax (one-hot when greedy)"

DRAFTER_KINDS: dict[str, DrafterKind] = {
    kind.name: kind
    for kind in (
        DrafterKind(
            "none", "target only", "nobody: target-only decoding, the baseline (same code path, zero drafts)",
            "—", "", "none", False, "#868e96",
        ),
        DrafterKind(
            "ngram", "prompt lookup",
            "prompt lookup: the continuation of the latest earlier match of the last 1–3 tokens",
            "one-hot", "", "lookup", False, "#e67700",
        ),
        DrafterKind(
            "int4", "4-bit copy",
            "the target's own weights quantized to NF4 with bitsandbytes (on llama.cpp: a lower-bit GGUF copy)",
            _MODEL_Q, "bitsandbytes", "target", True, "#1971c2",
        ),
        DrafterKind(
            "sibling", "smaller model", "a smaller model of the same family with the same tokenizer",
            _MODEL_Q, "a sibling entry in models.yaml", "sibling", False, "#2f9e44",
        ),
        DrafterKind(
            "sibling-int4", "4-bit smaller model",
            "the sibling quantized to NF4 while loading (on llama.cpp: a lower-bit GGUF copy)",
            _MODEL_Q, "a sibling entry in models.yaml, bitsandbytes", "sibling", True, "#9c36b5",
        ),
        DrafterKind(
            "hybrid", "lookup, then a model",
            "lookup first (the continuation seen most often after the last 3–8 tokens), else the fastest model drafter",
            "one-hot for lookup rounds, the model's softmax for model rounds", "a model drafter", "hybrid", False,
            "#c2255c",
        ),
    )
}
"""Every drafter kind, in display order."""

KIND_NAMES: tuple[str, ...] = tuple(DRAFTER_KINDS)
"""The kinds' names in display order: none, ngram, int4, sibling, sibling-int4, hybrid."""

SPECULATIVE_KIND_NAMES: tuple[str, ...] = tuple(k for k in KIND_NAMES if DRAFTER_KINDS[k].source != "none")
"""Kinds that actually draft (all but ``none``): the choices of ``audit`` and ``bench``."""

DEFAULT_ORDER: tuple[str, ...] = ("sibling-int4", "sibling", "int4", "ngram", "none")
"""The app's drafter at start when none is asked for: the first kind the target offers.
sibling-int4 first: the fastest in ``python -m specchat bench`` on the default pair on a 2-core
CPU, and its quantization takes about 10 s; the int4 copy of the target is re-quantized at
every start (about a minute), so it loads only when picked."""


def kinds_for(has_sibling: bool, *, has_int4: bool = True) -> list[str]:
    """The kinds a target can use, in display order: all but the sibling kinds when it has no
    sibling, and but the int4 kinds when its runtime cannot make a 4-bit copy (``has_int4``
    False: llama.cpp without its quantizer); the hybrid only when a model kind is left for it."""
    kinds = [k for k in KIND_NAMES if (has_sibling or not DRAFTER_KINDS[k].needs_sibling)
             and (has_int4 or not DRAFTER_KINDS[k].int4)]
    if not any(DRAFTER_KINDS[k].own_model for k in kinds):
        kinds = [k for k in kinds if DRAFTER_KINDS[k].source != "hybrid"]
    return kinds


def default_order(runtime: str = "transformers") -> tuple[str, ...]:
    """:data:`DEFAULT_ORDER` for ``runtime``; on llama.cpp the int4 kinds come last: their
    lower-bit GGUF copy is made on first use (tens of seconds) and a 4-bit target's 2-bit copy
    drafts at about the target's own cost on a CPU (measured: 43.9 against 44.2 ms per token),
    so they are built when picked, not by default."""
    if runtime != "llamacpp":
        return DEFAULT_ORDER
    return tuple(k for k in DEFAULT_ORDER if not DRAFTER_KINDS[k].int4) + tuple(
        k for k in DEFAULT_ORDER if DRAFTER_KINDS[k].int4)


def get(name: str) -> DrafterKind:
    """The kind called ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    try:
        return DRAFTER_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown drafter kind {name!r} (known: {', '.join(KIND_NAMES)})") from None


def color(name: str, default: str = "#343a40") -> str:
    """Chart color of a kind (``default`` for an unknown name, e.g. a custom drafter)."""
    kind = DRAFTER_KINDS.get(name)
    return kind.color if kind else default


def dropdown_hint() -> str:
    """One line for the app's drafter menu: ``none = target only · ngram = prompt lookup · …``."""
    return " · ".join(f"{k.name} = {k.short}" for k in DRAFTER_KINDS.values())


def markdown_table() -> str:
    """The README's table of drafters (a test keeps the README in step with this table)."""
    rows = ["| drafter | what proposes tokens | q (draft_probs) |", "|---|---|---|"]
    rows += [f"| `{k.name}` | {k.description} | {k.draft_probs} |" for k in DRAFTER_KINDS.values()]
    return "\n".join(rows)
