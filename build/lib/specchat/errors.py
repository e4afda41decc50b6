"""Exceptions specchat raises for problems a user can fix (bad config, missing model files).

Every message is one paragraph that names the file / entry / package concerned and says what
to do. Catch :class:`SpecchatError` to report any of them without a traceback.
"""

from __future__ import annotations


class SpecchatError(Exception):
    """Base class of every error specchat raises on purpose."""


class RegistryError(SpecchatError):
    """``models.yaml`` is unreadable or invalid, or a model name is unknown."""


class ModelSourceError(SpecchatError):
    """No usable source for a model's weights (packages not installed, file missing, bad local dir)."""


class ChecksumError(SpecchatError):
    """Model bytes assembled from installed packages do not match the registry's size or sha256."""


class TokenizerMismatchError(SpecchatError):
    """A drafter's tokenizer differs from its target's, so their token ids cannot be compared."""
