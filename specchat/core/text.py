"""Incremental detokenization with stop strings: the text a stream may show, token by token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Tokenizer(Protocol):
    """What the engine and the detokenizer need of a tokenizer: ids → text. A transformers
    tokenizer is one; another runtime wraps its own."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (U+FFFD where an id ends inside a UTF-8 character)."""


class StreamingDetokenizer:
    """Turn committed token ids into displayable text deltas, and find stop strings.

    Text is held back while it ends in an incomplete UTF-8 character (the decoder yields
    U+FFFD until the character's last byte arrives) or while its end could still be the start
    of a stop string. The concatenation of all deltas is exactly the reply text; a stop string
    and anything after it never appear.

    Args:
        tokenizer: decodes ids (``skip_special_tokens=True``); None gives empty text.
        stop_strings: non-empty strings that end the reply.
    """

    def __init__(self, tokenizer: Tokenizer | None, stop_strings: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.ids: list[int] = []
        self._prefix_offset = 0  # ids[prefix_offset:read_offset] decode to text already produced
        self._read_offset = 0
        self._held = ""  # produced text not yet released (possible stop-string prefix)
        self.text = ""  # released text
        self.stopped = False

    def add(self, token_id: int, *, last: bool = False) -> str:
        """Add one committed token; return the text to release now.

        Args:
            last: this is the final token (EOS, budget or context reached): flush everything
                held, including an incomplete character.
        After a stop string is found, ``stopped`` is True and the delta excludes it.
        """
        if self.stopped:
            raise RuntimeError("StreamingDetokenizer: token added after a stop string")
        self.ids.append(token_id)
        self._held += self._decode_new(final=last)
        cut = self._find_stop()
        if cut is not None:
            release, self._held, self.stopped = self._held[:cut], "", True
        elif last:
            release, self._held = self._held, ""
        else:
            keep = self._stop_prefix_len(self._held)
            release, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep :]
        self.text += release
        return release

    def flush(self) -> str:
        """Release everything held back (the generation ends without a final token)."""
        if self.stopped:
            return ""
        release = self._held + self._decode_new(final=True)
        self._held = ""
        self.text += release
        return release

    def _decode_new(self, *, final: bool) -> str:
        if self.tokenizer is None:
            return ""
        decode = self.tokenizer.decode
        prefix = decode(self.ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        full = decode(self.ids[self._prefix_offset :], skip_special_tokens=True)
        if len(full) > len(prefix) and (final or not full.endswith("\ufffd")):
            self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
            return full[len(prefix) :]
        return ""

    def _find_stop(self) -> int | None:
        """Earliest index in the held text where a stop string starts (None if none)."""
        hits = [i for i in (self._held.find(s) for s in self.stop_strings) if i >= 0]
        return min(hits) if hits else None

    def _stop_prefix_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stop_strings:
            for k in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:k]):
                    best = k
                    break
        return best
