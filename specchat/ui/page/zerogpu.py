"""A reply generated inside Hugging Face ZeroGPU's worker process, with Stop.

On a ZeroGPU Space, a function decorated with ``spaces.GPU`` runs in a process forked from the
app's, which holds a GPU for the call; what it is given and what it yields are pickled across
the process boundary. Two things follow:

* **Only plain Python data crosses** (dicts, lists, strings, numbers, booleans, None): the
  events (:mod:`specchat.core.events`), the notices and the generation settings are turned into
  plain data (:func:`to_plain`) on one side and back (:func:`from_plain`) on the other, so the
  worker's pickles never depend on how the other side imports specchat.
* **Stop must reach the worker.** The page's Stop sets a ``threading.Event`` in the app's
  process, which the forked worker cannot see. :class:`CancelSlot` is a shared integer created
  in the app's process before any fork (a worker inherits it): the app writes a generation's id
  there when the reply is stopped or its reader goes away, and the worker's engine, which checks
  ``cancel.is_set()`` before every round, stops at that round's end as it does in one process.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specchat.service_api import ChatServiceProtocol


def _types() -> dict[str, type]:
    """The classes that cross the boundary as plain data, by name (imported on first use: this
    module is imported by the app before torch)."""
    from specchat.analysis import trace
    from specchat.core import config, events
    from specchat.service_api import Notice

    classes = (events.TokenEvent, events.RoundEvent, events.DoneEvent, events.DrafterFailedEvent, events.PrefillEvent, Notice,
               events.TokenKind, events.StopReason, config.GenerationConfig, trace.RoundTrace,
               trace.DraftedToken, trace.PositionTrace, trace.ProofTrace, trace.CommittedToken)
    return {cls.__name__: cls for cls in classes}


def to_plain(obj: Any) -> Any:
    """``obj`` as plain data: a dataclass becomes ``{"__type__": name, field: value, …}``, an
    enum ``{"__enum__": name, "value": …}``, a tuple ``{"__tuple__": [...]}``; lists, dicts,
    strings, numbers, booleans and None stay (their items converted).

    Raises:
        TypeError: for anything else (a tensor, an arbitrary object): it must not cross.
    """
    if obj is None or isinstance(obj, (bool, int, float, str)) and not isinstance(obj, enum.Enum):
        return obj
    if isinstance(obj, enum.Enum):
        return {"__enum__": type(obj).__name__, "value": obj.value}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__,
                **{f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, tuple):
        return {"__tuple__": [to_plain(x) for x in obj]}
    if isinstance(obj, list):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    raise TypeError(f"{type(obj).__name__} cannot cross the ZeroGPU process boundary as plain data")


def from_plain(data: Any, _types_by_name: dict[str, type] | None = None) -> Any:
    """The inverse of :func:`to_plain`. Raises ValueError for an unknown type name."""
    types = _types_by_name if _types_by_name is not None else _types()
    if isinstance(data, list):
        return [from_plain(x, types) for x in data]
    if not isinstance(data, dict):
        return data
    if "__tuple__" in data:
        return tuple(from_plain(x, types) for x in data["__tuple__"])
    for key in ("__enum__", "__type__"):
        if key in data and data[key] not in types:
            raise ValueError(f"unknown type {data[key]!r} from the ZeroGPU worker")
    if "__enum__" in data:
        return types[data["__enum__"]](data["value"])
    if "__type__" in data:
        fields = {k: from_plain(v, types) for k, v in data.items() if k != "__type__"}
        return types[data["__type__"]](**fields)
    return {k: from_plain(v, types) for k, v in data.items()}


class CancelSlot:
    """Stop for a generation that runs in a forked worker. Create it in the app's process
    before any worker is forked (at import): a forked worker inherits the shared integer.
    One generation runs at a time (the app's queue), so one slot serves them all."""

    def __init__(self) -> None:
        self._value = multiprocessing.get_context("fork").Value("q", -1)
        self._ids = itertools.count()

    def new_id(self) -> int:
        """A fresh generation id (in the app's process)."""
        return next(self._ids)

    def cancel(self, generation: int) -> None:
        """Ask the worker that runs ``generation`` to stop at the end of its round."""
        self._value.value = generation

    def flag(self, generation: int) -> _Flag:
        """What the worker's engine checks: ``is_set()`` is True once ``generation`` is cancelled."""
        return _Flag(self, generation)


@dataclasses.dataclass(frozen=True)
class _Flag:
    slot: CancelSlot
    generation: int

    def is_set(self) -> bool:
        return self.slot._value.value == self.generation


def worker_stream(
    service: ChatServiceProtocol, slot: CancelSlot, history: list[dict], message: str, drafter: str, config: dict,
    generation: int, continue_from: str | None = None,
) -> Iterator[Any]:
    """In the worker: the chat turn's events and notices, as plain data. ``config`` is a
    :class:`~specchat.core.config.GenerationConfig` as :func:`to_plain` gave it; the engine stops
    when ``slot`` says ``generation`` is cancelled."""
    import torch

    # A process forked after its parent ran a parallel CPU region (the warm-up, an earlier reply)
    # hangs in its first OpenMP region (GNU libgomp's thread pool does not survive fork; seen
    # with torch 2.13 here). One CPU thread avoids it; on ZeroGPU the passes run on the GPU.
    torch.set_num_threads(1)
    settings = from_plain(config)
    for item in service.stream_chat(history, message, drafter=drafter, config=settings, cancel=slot.flag(generation),
                                    prefill_progress=True, continue_from=continue_from):
        yield to_plain(item)


def app_stream(
    gpu_fn: Callable[..., Iterator[Any]], slot: CancelSlot, history: list[dict], message: str, drafter: str,
    config: Any, cancel: Any, continue_from: str | None = None,
) -> Iterator[Any]:
    """In the app's process: run ``gpu_fn`` (the ``spaces.GPU``-decorated :func:`worker_stream`)
    with plain arguments and yield its events as events. When ``cancel`` (the page's Stop) is
    set, or the reader stops before the end (a closed tab), the worker is told to stop."""
    generation = slot.new_id()
    if cancel is not None and cancel.is_set():
        slot.cancel(generation)
    types = _types()
    plain_history = [{"role": str(m["role"]), "content": str(m["content"])} for m in history]
    stream = gpu_fn(plain_history, message, drafter, to_plain(config), generation, continue_from)
    finished = False
    try:
        for data in stream:
            if cancel is not None and cancel.is_set():
                slot.cancel(generation)
            yield from_plain(data, types)
        finished = True
    finally:
        if not finished:  # stopped reading early: tell the worker first, then let go of its stream
            slot.cancel(generation)
        close = getattr(stream, "close", None)
        if close is not None:
            close()
