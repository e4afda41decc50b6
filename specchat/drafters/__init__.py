"""Drafters: cheap proposers of draft tokens for the target to verify.

One protocol (:class:`~specchat.core.draft.Drafter`), three implementations: a model drafter
(a sibling model or an int4 copy of the target), prompt n-gram lookup, and the hybrid of the two
(lookup first, then the model); :mod:`specchat.drafters.kinds` is the one table of the drafter
kinds the app, the CLI and the registry offer.

The implementations are imported on first use, so that reading the table of kinds
(``from specchat.drafters import kinds``) imports no torch.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "Draft": "specchat.core.draft",
    "Drafter": "specchat.core.draft",
    "HybridDrafter": "specchat.drafters.hybrid",
    "ModelDrafter": "specchat.drafters.model",
    "NgramDrafter": "specchat.drafters.ngram",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
