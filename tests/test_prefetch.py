"""Prefetched: a reply's events computed in a thread while the handler's last update is sent."""

import threading

import pytest

from specchat.ui.session.prefetch import Prefetched


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
