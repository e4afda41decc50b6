"""The transcript's value as the page receives it survives Gradio's streaming diff.

Gradio sends a streamed value as ``diff(last, new)`` and the browser applies it to its copy of
``last``; the copy must come out equal to ``new`` (checked with gradio's own ``utils.diff`` and
gradio_client's ``apply_diff``, which mirrors the browser's). The feeds are real: a session's
replies rendered from token events, the sequence a page receives while replies stream.
"""

from __future__ import annotations

import copy
import random

from gradio.utils import diff
from gradio_client.utils import apply_diff

from specchat.core.events import TokenEvent, TokenKind
from specchat.ui.html.transcript import feed_messages, unwire, wire
from specchat.ui.session.reply import Exchange, Phase, Reply, ReplySettings

A, R, T = TokenKind.ACCEPTED, TokenKind.RESAMPLED, TokenKind.TARGET


def _reply(number: int, pieces: list[str]) -> Reply:
    reply = Reply(number, f"message {number}", ReplySettings("ngram", 4, True, 0.0, 1.0, 256))
    reply.phase = Phase.RUNNING
    for i, text in enumerate(pieces):
        reply.renderer.add_token(TokenEvent(i, (A, R, T)[i % 3], text, 0.9, 0.8, None, None, None, 0, i, 4))
    return reply


def _item(ex_id: int, reply: Reply) -> dict:
    exchange = Exchange(reply.message, reply)
    exchange.id = ex_id
    return exchange.item()


CODE = ["Here", " is", " code", ":\n\n", "```python\n", "def f(x):\n", "    return", " x\n", "\n", "y = 1\n", "```\n",
        "\n", "Done", "."]


def _applies(old: dict, new: dict) -> bool:
    return apply_diff(copy.deepcopy(old), diff(old, new)) == new


def test_a_new_reply_that_drops_the_one_before_arrives_intact():
    # the first update of reply 2 carries reply 1 (it ended a moment ago) and reply 2; the next
    # carries reply 2 only: the exchanges list loses one while reply 1's code lines are compared
    # with reply 2's (the update that made a page stop streaming)
    first = {"seq": 5, "reset": False, "items": [_item(1, _reply(1, CODE)), _item(2, _reply(2, []))]}
    second = {"seq": 6, "reset": False, "items": [_item(2, _reply(2, CODE[:6]))]}
    assert _applies(wire(first), wire(second))
    assert unwire(wire(second)) == second  # the page reads back the feed the session made


def test_random_streams_of_feeds_arrive_intact():
    rng = random.Random(7)
    pieces = CODE * 3
    for _ in range(300):
        feeds = []
        for _ in range(6):
            items = []
            for ex_id in sorted(rng.sample(range(1, 5), rng.randint(1, 3))):
                items.append(_item(ex_id, _reply(ex_id, pieces[: rng.randint(0, len(pieces))])))
            feeds.append(wire({"seq": len(feeds), "reset": False, "items": items}))
        for old, new in zip(feeds, feeds[1:]):
            assert _applies(old, new)


def test_feed_messages_reads_the_wire_shape_and_the_list_shape_alike():
    feed = {"seq": 1, "reset": False, "items": [_item(1, _reply(1, CODE))]}
    assert feed_messages(wire(feed)) == feed_messages(feed)
    assert "def" in feed_messages(feed)[1]["content"]
