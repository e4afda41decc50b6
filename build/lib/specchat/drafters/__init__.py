"""Drafters: cheap proposers of draft tokens for the target to verify.

One protocol (:class:`~specchat.drafters.base.Drafter`), three implementations: a model drafter
(a sibling model or an int4 copy of the target), prompt n-gram lookup, and the hybrid of the two
(lookup first, then the model).
"""

from specchat.drafters.base import Draft, Drafter
from specchat.drafters.hybrid import HybridDrafter
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter

__all__ = ["Draft", "Drafter", "HybridDrafter", "ModelDrafter", "NgramDrafter"]
