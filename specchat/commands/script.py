"""A scripted multi-turn conversation, played the way the app plays a chat: each message is sent
with the history so far through the chat template, and the conversation's KV cache is kept
between turns (``ModelRuntime.start``, :mod:`specchat.core.runtime`). ``python -m specchat chat --script`` and the bench's
multi-turn scenario both play scripts through :func:`play_script`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specchat.analysis.ledger import count_ledger
from specchat.conversation import Conversation, ReplySettings
from specchat.core.events import DoneEvent, TokenEvent
from specchat.core.metrics import SpeculationMetrics

if TYPE_CHECKING:
    from specchat.service import ChatService


def load_script(path: str) -> list[str]:
    """The messages of a chat script: a JSON list of non-blank strings.

    Raises:
        ValueError: unreadable, not JSON, not such a list (the message says which).
    """
    try:
        with open(path, encoding="utf-8") as f:
            messages = json.load(f)
    except OSError as exc:
        raise ValueError(f"--script {path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"--script {path}: not JSON ({exc})") from None
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"--script {path}: expected a non-empty JSON list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, str) or not m.strip():
            raise ValueError(f"--script {path}: message {i + 1} is not a non-blank string")
    return messages


def read_messages(lines: Iterable[str]) -> Iterator[str]:
    """The messages of ``--script -``: one JSON string per line of ``lines`` (blank lines skipped),
    read as they come, so a caller can send the next message after reading the last reply (the
    page bench's lockstep).

    Raises:
        ValueError: a line that is not a JSON string of non-blank text (the message gives its number).
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--script -: line {number} is not JSON ({exc})") from None
        if not isinstance(message, str) or not message.strip():
            raise ValueError(f"--script -: line {number} is not a JSON string of non-blank text")
        yield message


@dataclass
class Turn:
    """One played turn: its record (the JSON object ``chat --json`` prints), the metrics and the
    DoneEvent of its reply, and the notices the service gave."""

    record: dict
    metrics: SpeculationMetrics
    done: DoneEvent
    notices: list[str] = field(default_factory=list)


def play_script(
    service: ChatService,
    messages: Iterable[str],
    *,
    settings: ReplySettings,
    seed: int = 0,
    on_token: Callable[[TokenEvent], None] | None = None,
) -> Iterator[Turn]:
    """Play ``messages`` in turn as one :class:`~specchat.conversation.Conversation` (reply n gets
    seed ``seed + n - 1``); yield each :class:`Turn` when its reply has ended.

    The record holds ``turn`` (1-based), ``message``, ``text``, ``token_ids``, ``ttft_ms``
    (message sent to first token, milliseconds; None for a reply without tokens),
    ``prefill_tokens`` (prompt tokens this turn actually prefilled), ``num_prompt_tokens``,
    ``prefill_ms``, ``stop_reason``, ``drafter``, ``seed``, ``notices``, ``stats``
    (:meth:`SpeculationMetrics.summary`), ``ledger`` and ``wall_ms`` (message sent to the reply's
    end, prefill included, milliseconds).

    Raises:
        ValueError: an out-of-range setting; whatever ``service.stream_chat`` raises (SpecchatError, ValueError).
    """
    from specchat.service import Notice

    conversation = Conversation(seed=seed)
    drafter = settings.drafter
    for turn, message in enumerate(messages, 1):
        begun = conversation.begin(message, settings)
        metrics = SpeculationMetrics()
        notices: list[str] = []
        start = time.perf_counter()
        ttft_ms = None
        for event in conversation.stream_turn(begun, service.stream_chat):
            if isinstance(event, Notice):
                notices.append(event.text)
                continue
            if isinstance(event, TokenEvent):
                if ttft_ms is None:
                    ttft_ms = (time.perf_counter() - start) * 1000
                if on_token is not None:
                    on_token(event)
            metrics.update(event)
        done = metrics.done
        assert isinstance(done, DoneEvent)
        ledger = count_ledger(metrics.rounds, sizes=service.model_sizes(drafter),
                              alpha=metrics.acceptance_rate, prefill_ms=done.prefill_ms,
                              num_prefilled=done.num_prefilled, num_prompt_tokens=done.num_prompt_tokens,
                              drafter_prefill_ms=done.drafter_prefill_ms)
        record = {
            "turn": turn, "message": message, "text": done.text, "token_ids": list(done.token_ids),
            "ttft_ms": ttft_ms, "prefill_tokens": done.num_prefilled, "num_prompt_tokens": done.num_prompt_tokens,
            "prefill_ms": done.prefill_ms, "stop_reason": done.stop_reason.value, "drafter": drafter,
            "seed": begun.config.seed, "notices": notices, "stats": metrics.summary(), "ledger": ledger.summary(),
            "wall_ms": (time.perf_counter() - start) * 1000,  # message sent to the reply's end (prefill included)
        }
        yield Turn(record, metrics, done, notices)
