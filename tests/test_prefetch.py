"""Prefetched: a reply's events computed in a thread while the handler's last update is sent."""

import threading
import time

import pytest

from specchat.ui.session.prefetch import IDLE, Prefetched


def test_items_arrive_in_order_and_the_stream_runs_ahead_of_the_reader():
    finished = threading.Event()

    def stream():
        yield from range(5)
        finished.set()

    items = Prefetched(stream, threading.Event())
    assert next(items) == 0
    # the reader still holds item 0; the stream has gone on to its end meanwhile
    assert finished.wait(5)
    assert list(items) == [1, 2, 3, 4]


def test_a_pause_item_holds_the_stream_until_the_reader_asks_for_more():
    asked = []  # how many items the reader had asked for when the stream made each item
    reader_asks = [0]

    def stream():
        for i in range(4):
            asked.append(reader_asks[0])
            yield i

    items = Prefetched(stream, threading.Event(), pause_after=lambda item: item == 1)
    seen = []
    for _ in range(4):
        reader_asks[0] += 1
        seen.append(next(items))
        if seen[-1] == 1:
            # holding item 1: the stream must not make item 2 yet
            assert not items.join(0.2)
            assert len(asked) == 2
    assert seen == [0, 1, 2, 3]
    # item 2 was made only after the reader asked for its 3rd item
    assert asked[2] >= 3


def test_an_error_is_raised_in_the_reader_after_the_items_before_it():
    def stream():
        yield "a"
        yield "b"
        raise ValueError("the model failed")

    items = Prefetched(stream, threading.Event())
    assert next(items) == "a"
    assert next(items) == "b"
    with pytest.raises(ValueError, match="the model failed"):
        next(items)
    with pytest.raises(StopIteration):
        next(items)


def test_close_sets_cancel_and_the_stream_ends_by_itself():
    cancel = threading.Event()
    closed = threading.Event()

    def stream():
        try:
            i = 0
            while not cancel.is_set():
                yield i
                i += 1
                cancel.wait(0.001)
        finally:
            closed.set()

    items = Prefetched(stream, cancel)
    assert next(items) == 0
    items.close()
    assert cancel.is_set()
    assert items.join(5)
    assert closed.is_set()  # the stream's own cleanup ran (the engine's lock is released there)
    with pytest.raises(StopIteration):
        next(items)


def test_close_while_paused_releases_the_stream():
    cancel = threading.Event()

    def stream():
        yield "timing next"
        yield "never read"

    items = Prefetched(stream, cancel, pause_after=lambda item: item == "timing next")
    assert next(items) == "timing next"
    items.close()
    assert items.join(5)


# -- waking the reader only when it has something to do -------------------------------------------
def _held_stream(items, go, then=()):
    """``items`` at once, then (after ``go`` is set) ``then``, then wait for ever (no end to wake the reader)."""
    def stream():
        yield from items
        go.wait(10)
        yield from then
        threading.Event().wait(30)
    return stream


def test_an_item_that_does_not_wake_the_reader_waits_for_one_that_does():
    go, round_ends = threading.Event(), threading.Event()

    def stream():
        go.wait(10)
        yield from ["token", "token"]
        round_ends.wait(10)
        yield "round"
        threading.Event().wait(30)

    items = Prefetched(stream, threading.Event(), wakes=lambda item: item == "round")
    got = []
    reader = threading.Thread(target=lambda: got.append(items.next_or_idle(10)), daemon=True)
    reader.start()
    time.sleep(0.1)  # the reader waits
    go.set()
    reader.join(0.5)
    assert reader.is_alive() and got == []  # two tokens came and did not wake it
    round_ends.set()
    reader.join(5)
    assert got == ["token"]  # woken by the round: the items queued before it come first
    assert [items.next_or_idle(0), items.next_or_idle(0)] == ["token", "round"]  # already queued: at once


def test_the_reader_sleeps_through_items_until_quiet_until_and_then_reads_them_all():
    go = threading.Event()
    items = Prefetched(_held_stream([], go, ["a", "b"]), threading.Event())
    threading.Timer(0.1, go.set).start()  # both items come 0.1 s into the reader's 0.6 s of quiet
    start = time.monotonic()
    first = items.next_or_idle(5, quiet_until=start + 0.6)
    assert first == "a" and time.monotonic() - start >= 0.6
    assert items.next_or_idle(0, quiet_until=time.monotonic() + 5) == "b"  # queued: returned at once
    assert items.next_or_idle(0.05) is IDLE


def test_the_pause_before_a_timing_round_and_the_end_wake_a_quiet_reader_at_once():
    go = threading.Event()
    items = Prefetched(_held_stream([], go, ["timing next", "after"]), threading.Event(),
                       pause_after=lambda item: item == "timing next")
    threading.Timer(0.1, go.set).start()
    start = time.monotonic()
    assert items.next_or_idle(10, quiet_until=start + 8) == "timing next"
    assert time.monotonic() - start < 4  # woken by the pause, not by the 8 s of quiet
    ended = Prefetched(lambda: iter(["last"]), threading.Event())
    start = time.monotonic()
    assert ended.next_or_idle(10, quiet_until=start + 8) == "last" and time.monotonic() - start < 4
    with pytest.raises(StopIteration):
        ended.next_or_idle(10, quiet_until=time.monotonic() + 8)


def test_queued_says_whether_an_item_waits_unread():
    items = Prefetched(lambda: iter([1, 2, 3]), threading.Event())
    assert items.join(5)  # the whole stream is queued
    assert items.queued(lambda item: item == 3) and not items.queued(lambda item: item == 4)
    assert list(items) == [1, 2, 3] and not items.queued(lambda item: True)
