"""Chat history → prompt token ids, with the model's own chat template (or, for a model that has
none, such as a base model, as plain text: :func:`plain_prompt_ids`)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass(frozen=True)
class ChatPrompt:
    """A templated prompt ready for the engine.

    Attributes:
        input_ids: the prompt token ids (chat template applied, generation prompt added).
        num_dropped_messages: oldest history messages removed to fit the context window.
    """

    input_ids: list[int]
    num_dropped_messages: int


def build_chat_prompt(
    tokenizer: PreTrainedTokenizerBase,
    history: list[Message],
    message: str,
    *,
    context_length: int,
    max_new_tokens: int,
    continue_from: str | None = None,
) -> ChatPrompt:
    """Apply the chat template to ``history + [user message]``, trimming the oldest turns. A
    tokenizer without a chat template gets the messages as plain text (:func:`plain_prompt_ids`).

    ``continue_from``: the start of the assistant's reply to ``message`` (a reply cut at its token
    limit): the prompt ends inside that reply, so the model writes on from its last token
    (transformers' ``continue_final_message``; as plain text, the reply's text right after the
    message).

    Whole messages are dropped oldest first (a leading system message is kept) until the
    prompt plus ``max_new_tokens`` fits ``context_length``. The current message is never cut:
    if it alone leaves no room for a reply, that is an error. If it fits but the full budget
    does not, the reply gets the room that is left.

    Raises:
        ValueError: the message is empty or whitespace only, or the message alone does not fit
            the context window.
    """
    if is_blank(message):
        raise ValueError("the message is empty: type something to send")
    system = [m for m in history[:1] if m.get("role") == "system"]
    turns = [m for m in history[len(system) :] if m.get("content")]
    current = [{"role": "user", "content": message}]
    if continue_from is not None:
        current.append({"role": "assistant", "content": continue_from})
    # The start indices the oldest-first drop rule visits (listing them needs no templating).
    starts, s = [0], 0
    while s < len(turns):
        s += 2 if len(turns) - s > 1 and turns[s + 1].get("role") == "assistant" else 1
        starts.append(s)
    cache: dict[int, list[int]] = {}

    def ids_from(k: int) -> list[int]:  # the prompt keeping turns[starts[k]:]
        if k not in cache:
            cache[k] = _template(tokenizer, [*system, *turns[starts[k] :], *current], continuing=continue_from is not None)
        return cache[k]

    def fits(k: int) -> bool:
        return len(ids_from(k)) + max_new_tokens <= context_length or k == len(starts) - 1

    # The first start that fits, searched from the newest end (galloping, then bisection; a
    # prompt with fewer messages is never longer), so the cost depends on the messages kept,
    # not on the whole history: dropping one start at a time from the oldest re-templated the
    # whole history once per dropped message, quadratic in the length of the chat.
    hi, step = len(starts) - 1, 1
    lo = hi - step
    while lo >= 0 and fits(lo):
        hi, step = lo, step * 2
        lo = hi - step
    lo = max(lo, -1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        hi, lo = (mid, lo) if fits(mid) else (hi, mid)
    ids, dropped = ids_from(hi), starts[hi]
    if len(ids) >= context_length:
        raise ValueError(
            f"the message is {len(ids)} tokens {'with the chat template' if has_chat_template(tokenizer) else 'as plain text'}; "
            f"the context window holds "
            f"{context_length}: shorten it"
        )
    return ChatPrompt(ids, dropped)


# letters and symbols that render as blank space but are not whitespace: Hangul fillers, the
# braille blank, halfwidth Hangul filler
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\u2800\uffa0")


def is_blank(text: str | None) -> bool:
    """True if ``text`` shows nothing: empty, or only whitespace, invisible format characters
    (category Cf: zero-width space / joiners, BOM, word joiner, …) and blank glyphs (Hangul
    fillers, the braille blank)."""
    return not text or all(
        ch.isspace() or ch in _BLANK_GLYPHS or unicodedata.category(ch) == "Cf" for ch in text
    )


PLAIN_PROMPT_NOTE = "this model has no chat template: messages reach it as plain text, and the reply continues it"


def has_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer carries a chat template (a base model's usually does not)."""
    return getattr(tokenizer, "chat_template", None) is not None


def plain_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: list[Message], *, continuing: bool = False) -> list[int]:
    """The prompt for a model without a chat template: every message's text, oldest first, joined
    by a blank line, encoded with the tokenizer's own special tokens (e.g. BOS). One message alone
    is exactly its text, as a plain-text prompt (``ChatService.encode_plain``) is. ``continuing``:
    the last message is the start of the reply to the one before, which it follows directly (as
    the model wrote it)."""
    texts = [m["content"] for m in messages]
    if continuing and len(texts) > 1:
        texts = [*texts[:-2], texts[-2] + texts[-1]]
    return [int(t) for t in tokenizer("\n\n".join(texts)).input_ids]


def _template(tokenizer: PreTrainedTokenizerBase, messages: list[Message], *, continuing: bool = False) -> list[int]:
    if not has_chat_template(tokenizer):
        return plain_prompt_ids(tokenizer, messages, continuing=continuing)
    if continuing:  # the prompt ends inside the last (assistant) message: no end of turn, no new header
        out = tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=True)
    else:
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(out, dict) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return [int(t) for t in out]


# End-of-turn markers of common chat templates; added to the EOS ids when the vocab has them.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


def eos_token_ids(model, tokenizer) -> set[int]:
    """EOS ids of the model: generation config (a transformers model; None for none), tokenizer,
    and end-of-turn chat markers."""
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is not None:
        ids.update([eos] if isinstance(eos, int) else eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in _END_OF_TURN_TOKENS if t in vocab)
    return ids
