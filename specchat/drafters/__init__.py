"""Drafters: cheap proposers of draft tokens for the target to verify.

One protocol (:class:`~specchat.drafters.base.Drafter`), two implementations: a model drafter
(a sibling model or an int4 copy of the target) and prompt n-gram lookup.
"""

from specchat.drafters.base import Draft, Drafter
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter

__all__ = ["Draft", "Drafter", "ModelDrafter", "NgramDrafter"]
