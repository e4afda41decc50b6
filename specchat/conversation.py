"""One conversation: the turns the model sees, and what one turn is.

Every surface that chats holds a :class:`Conversation`: the page (one per browser session), the
terminal chat, the scripted chat (``specchat chat --script``), the soak and the page bench. It
owns the three rules a chat turn needs, so they are written once:

- **what the model sees**: the system prompt, then the kept turns as plain text
  (``[{"role": "user" | "assistant", "content": str}]``); the service's chat template renders
  them and trims the oldest to the context window;
- **which turns are kept** (:meth:`Turn.answered`): a reply that failed is not; one that was
  stopped or abandoned before it wrote a token is not; every other is, with the text the engine
  committed (its TokenEvents' text, then the DoneEvent's ``final_text``);
- **the engine's settings** (:meth:`Conversation.config`): one ``GenerationConfig`` rule, with one
  seed rule: a conversation made with ``seed=S`` gives its n-th reply (1-based, counted since it
  began or was cleared) seed ``S + n - 1``; with ``seed=None`` each reply draws a fresh seed (the
  page; the trace file records it).

A turn is streamed by the surface (it owns cancelling and drawing), which passes each event to
:meth:`Turn.add` and ends with :meth:`Conversation.finish`; :meth:`Conversation.stream` does both
for a surface that only reads the events. No gradio, no torch import.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, StopReason, TokenEvent
from specchat.drafters import kinds as drafter_kinds

Message = dict[str, str]
StreamFn = Callable[..., Iterator[Any]]
"""``(history, message, drafter, config, cancel) → events``: how a surface streams a turn
(``ChatService.stream_chat`` with keyword arguments; the page passes its ZeroGPU wrapper)."""


@dataclass(frozen=True)
class ReplySettings:
    """The settings a reply is made with, captured when it starts (so a control changed while
    it streams never relabels it).

    Raises:
        ValueError: from :meth:`Conversation.config`, for an out-of-range setting (the message
            gives the range).
    """

    drafter: str
    num_speculative_tokens: int
    adaptive_gamma: bool
    temperature: float
    top_p: float
    max_new_tokens: int
    system_prompt: str = ""  # the conversation's system message ("" = none), through the chat template

    @classmethod
    def from_controls(cls, drafter: str, gamma: float, temperature: float, top_p: float, max_new_tokens: float,
                      adaptive: bool, system_prompt: str | None) -> ReplySettings:
        """The settings from a page's controls (in the page's input order). γ and max new tokens are
        sliders of step 1 whose number box takes any number: a typed 2.5 is rounded half up (3), as
        the label then shows, instead of being cut to 2 out of sight."""
        return cls(drafter, _round_half_up(gamma), bool(adaptive), float(temperature), float(top_p),
                   _round_half_up(max_new_tokens), str(system_prompt or ""))

    @classmethod
    def from_trace(cls, header: dict) -> ReplySettings:
        """The settings recorded in a trace file's header (missing ones get the defaults)."""
        c = header.get("config") or {}
        return cls(
            drafter=str(header.get("drafter", "?")),
            num_speculative_tokens=int(c.get("num_speculative_tokens", 4)),
            adaptive_gamma=bool(c.get("adaptive_gamma", False)),
            temperature=float(c.get("temperature", 0.0)),
            top_p=float(c.get("top_p", 1.0)),
            max_new_tokens=int(c.get("max_new_tokens", 256)),
        )

    def gamma_label(self, drafter: str) -> str:
        """``γ adaptive ≤ 12``, ``γ = 4``, or ``γ —`` for target-only decoding."""
        if drafter_kinds.DRAFTER_KINDS.get(drafter) is not None and drafter_kinds.get(drafter).source == "none":
            return "γ —"
        if self.adaptive_gamma:
            return f"γ adaptive ≤ {self.num_speculative_tokens}"
        return f"γ = {self.num_speculative_tokens}"

    def sampling_label(self) -> str:
        """``T 0 (greedy) · top-p 1``."""
        temperature = "T 0 (greedy)" if self.temperature == 0 else f"T {self.temperature:g}"
        return f"{temperature} · top-p {self.top_p:g}"


def _round_half_up(value: float) -> int:
    return int(math.floor(float(value) + 0.5))


def _whole(value: float, name: str) -> int:
    """``value`` as an int; ValueError for a fractional one (an API call's 2.5 is refused, not cut to 2)."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value:g}")
    return int(value)


def generation_config(settings: ReplySettings, seed: int, *, trace: bool = False) -> GenerationConfig:
    """The engine's settings for a reply made with ``settings``: speedups are always measured in
    the reply (timing rounds), and every round is traced when ``trace`` (the page's inspector,
    timeline and trace file).

    Raises:
        ValueError: an out-of-range setting (``GenerationConfig`` checks each).
    """
    return GenerationConfig(
        num_speculative_tokens=_whole(settings.num_speculative_tokens, "num_speculative_tokens (γ)"),
        adaptive_gamma=bool(settings.adaptive_gamma),
        temperature=float(settings.temperature),
        top_p=float(settings.top_p),
        max_new_tokens=_whole(settings.max_new_tokens, "max_new_tokens"),
        seed=seed,
        measure_speedup=True,
        trace=trace,
    )


@dataclass
class Turn:
    """One turn in progress: the message, what the model saw before it, and what the engine
    committed so far.

    Attributes:
        message: the user's message.
        settings: the reply's settings.
        config: the engine's settings (its seed included).
        history: what the model sees before this message: the system prompt, then the kept turns.
        done: the reply's DoneEvent, once it came (None for a stream closed before its end).
        failed: an error ended the reply (:meth:`fail`).
        continue_from: for a turn that continues the last reply (:meth:`Conversation.begin_continuation`),
            that reply's text, which the model writes on from; None for a new message.
    """

    message: str
    settings: ReplySettings
    config: GenerationConfig
    history: list[Message]
    done: DoneEvent | None = None
    failed: bool = False
    continue_from: str | None = None
    num_tokens: int = 0
    _pieces: list[str] = field(default_factory=list)
    _epoch: int = 0

    def add(self, event: Any) -> None:
        """Fold in one item of the turn's stream (engine events; other items are ignored)."""
        if isinstance(event, TokenEvent):
            self.num_tokens += 1
            self._pieces.append(event.text)
        elif isinstance(event, DoneEvent):
            self.done = event

    def fail(self) -> None:
        """An error ended the reply: the turn is not kept."""
        self.failed = True

    @property
    def text(self) -> str:
        """The reply's text as the engine committed it: every TokenEvent's text, then the
        DoneEvent's ``final_text`` (what ``DoneEvent.text`` holds, once the reply has ended)."""
        return "".join(self._pieces) + (self.done.final_text if self.done is not None else "")

    @property
    def answered(self) -> bool:
        """Whether the turn is kept in what the model sees: not failed, and either ended by
        itself (EOS, a stop string, the length limit: kept even when empty) or wrote at least
        one token before Stop or a closed stream ended it."""
        if self.failed:
            return False
        ended = self.done is not None and self.done.stop_reason is not StopReason.CANCELLED
        return ended or self.num_tokens > 0


class Conversation:
    """The turns the model sees, the system prompt, and the rules of a turn (module docstring).

    Args:
        seed: ``S``: reply n gets seed ``S + n - 1``; None: a fresh seed per reply.
        trace: every reply's rounds are traced (the page).
        system_prompt: the system message ("" = none); a reply's settings may change it.

    Thread safety: :meth:`clear` may be called while a turn streams (the page's Clear); that
    turn is then not kept.
    """

    def __init__(self, *, seed: int | None = None, trace: bool = False, system_prompt: str = ""):
        self.seed = seed
        self.trace = trace
        self.system_prompt = system_prompt
        self.messages: list[Message] = []  # the kept turns, plain text
        self._asked = 0  # replies begun since the conversation began or was cleared
        self._epoch = 0  # bumped by clear: a turn begun before it is not kept
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The number of kept turns."""
        return len(self.messages) // 2

    def history(self) -> list[Message]:
        """What the model sees before the next message: the system prompt (when set), then the
        kept turns."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt.strip() else []
        return system + [dict(m) for m in self.messages]

    def config(self, settings: ReplySettings) -> GenerationConfig:
        """The engine's settings the next reply gets (the seed rule in the module docstring).

        Raises:
            ValueError: an out-of-range setting.
        """
        seed = random.randrange(2**63) if self.seed is None else self.seed + self._asked
        return generation_config(settings, seed, trace=self.trace)

    def begin(self, message: str, settings: ReplySettings) -> Turn:
        """A turn for ``message``, counted as a reply asked for: its config (:meth:`config`) and
        the history it is sent with. ``settings.system_prompt`` becomes the conversation's system
        prompt.

        Raises:
            ValueError: an out-of-range setting (nothing changes).
        """
        with self._lock:
            config = self.config(settings)
            self._asked += 1
            self.system_prompt = settings.system_prompt
            return Turn(message, settings, config, self.history(), _epoch=self._epoch)

    def finish(self, turn: Turn) -> bool:
        """End ``turn``: keep it when :attr:`Turn.answered` (and the conversation was not cleared
        since it began). A continuation (:meth:`begin_continuation`) keeps the reply it continued
        with its new text after it, or as it was when the continuation is not kept. Returns
        whether the turn was kept."""
        with self._lock:
            if turn._epoch != self._epoch:
                return False
            before = turn.continue_from
            if not turn.answered:
                if before is not None:  # the continued reply goes back as it was
                    self.messages += [{"role": "user", "content": turn.message}, {"role": "assistant", "content": before}]
                return False
            text = (before or "") + turn.text
            self.messages += [{"role": "user", "content": turn.message}, {"role": "assistant", "content": text}]
        return True

    def take_back(self) -> Message | None:
        """Take the last kept turn out of what the model sees (Regenerate, Edit): its user message
        (``{"role": "user", "content": …}``), or None when no turn is kept."""
        with self._lock:
            if len(self.messages) < 2:
                return None
            user, _ = self.messages[-2:]
            del self.messages[-2:]
            return dict(user)

    def begin_continuation(self, settings: ReplySettings) -> Turn:
        """A turn that continues the last kept reply (Continue: one cut at its token limit): the
        model sees the history before that turn, its message, and the reply so far, and writes on;
        :meth:`finish` keeps the reply with the new text after it.

        Raises:
            ValueError: no kept turn to continue, or an out-of-range setting (nothing changes).
        """
        with self._lock:
            if len(self.messages) < 2:
                raise ValueError("there is no reply to continue")
            config = self.config(settings)
            self._asked += 1
            self.system_prompt = settings.system_prompt
            user, assistant = self.messages[-2:]
            del self.messages[-2:]
            return Turn(user["content"], settings, config, self.history(), continue_from=assistant["content"],
                        _epoch=self._epoch)

    def stream(self, stream_fn: StreamFn, message: str, settings: ReplySettings, **kwargs: Any) -> Generator[Any, None, None]:
        """Stream one turn through ``stream_fn`` (e.g. ``service.stream_chat``), yielding every
        item, and keep it at the end (also when the caller closes the stream early); a stream
        that raises ends a failed turn and re-raises. ``kwargs`` go to ``stream_fn``
        (``cancel``, ``prefill_progress``).

        Raises:
            ValueError: an out-of-range setting; whatever ``stream_fn`` raises.
        """
        yield from self.stream_turn(self.begin(message, settings), stream_fn, **kwargs)

    def stream_turn(self, turn: Turn, stream_fn: StreamFn, **kwargs: Any) -> Generator[Any, None, None]:
        """:meth:`stream` for a turn already begun (:meth:`begin`), for a caller that reads its
        config (its seed) first.

        Raises:
            whatever ``stream_fn`` raises.
        """
        if turn.continue_from is not None:
            kwargs["continue_from"] = turn.continue_from
        stream = stream_fn(turn.history, turn.message, drafter=turn.settings.drafter, config=turn.config, **kwargs)
        try:
            for item in stream:
                turn.add(item)
                yield item
        except Exception:
            turn.fail()
            raise
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            self.finish(turn)

    def clear(self) -> None:
        """Forget every turn (and the system prompt stays); the seed rule starts over, and a
        turn in progress is not kept."""
        with self._lock:
            self.messages = []
            self._asked = 0
            self._epoch += 1

    def restore(self, messages: list[Message], system_prompt: str = "") -> None:
        """Take over ``messages`` (checked by the caller: user/assistant pairs of text) as the
        kept turns, e.g. a conversation saved in the browser."""
        with self._lock:
            self.messages = [dict(m) for m in messages]
            self.system_prompt = system_prompt
            self._asked = len(self.messages) // 2


__all__ = ["Conversation", "Message", "ReplySettings", "StreamFn", "Turn", "generation_config"]
