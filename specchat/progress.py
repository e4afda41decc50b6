"""Progress of long loads, for the terminal (tqdm) and the UI (polled snapshots).

Every bar specchat creates is a :class:`tqdm` from this module: it draws in the terminal as
usual and also records its state on :data:`BOARD`, which the app polls to draw the same
progress in the browser (the loading runs in a background thread, which Gradio's own
``track_tqdm`` cannot see).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from tqdm.auto import tqdm as _tqdm


@dataclass(frozen=True)
class Snapshot:
    """What is loading now: ``stage`` (a sentence), and the innermost bar if any."""

    stage: str
    bar: str | None = None
    fraction: float | None = None  # 0…1, None when unknown


class ProgressBoard:
    """Thread-safe record of the current stage and the most recently updated bar."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stage = ""
        self._bar: str | None = None
        self._fraction: float | None = None
        self._echo: TextIO | None = None
        self._echo_start = 0.0

    def echo_to(self, stream: TextIO | None = sys.stderr, *, from_now: bool = False) -> None:
        """From now on also print each stage to ``stream`` (the terminal), after the seconds
        since the process started (since the command was typed, Python's imports included), or
        with ``from_now`` since this call: ``[ 12.3 s] Calibrating: target only``. None stops it."""
        with self._lock:
            self._echo, self._echo_start = stream, time.monotonic() - (0.0 if from_now else process_age_s())

    @contextlib.contextmanager
    def echoing(self, stream: TextIO = sys.stderr, *, from_now: bool = False):
        """:meth:`echo_to` ``stream`` while inside, and no more after (also after an error)."""
        self.echo_to(stream, from_now=from_now)
        try:
            yield
        finally:
            self.echo_to(None)

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage, self._bar, self._fraction = text, None, None
            if self._echo is not None and text:
                try:
                    print(f"[{time.monotonic() - self._echo_start:5.1f} s] {text}", file=self._echo, flush=True)
                except (OSError, ValueError):  # a closed terminal: the page still shows it
                    self._echo = None

    def record(self, desc: str, n: float, total: float | None, postfix: str | None) -> None:
        with self._lock:
            label = desc + (f" ({postfix})" if postfix else "")
            self._bar = label or None
            self._fraction = min(1.0, n / total) if total else None

    def clear_bar(self) -> None:
        with self._lock:
            self._bar, self._fraction = None, None

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._stage, self._bar, self._fraction)


def process_age_s() -> float:
    """Seconds since this process started (psutil, from the operating system's record), or 0
    where that cannot be read."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # no psutil, or a platform that does not say: count from now
        return 0.0


BOARD = ProgressBoard()


class tqdm(_tqdm):  # noqa: N801 - a drop-in for tqdm.auto.tqdm
    """tqdm that also reports to :data:`BOARD`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._report()

    def update(self, n=1):
        out = super().update(n)
        self._report()
        return out

    def set_postfix_str(self, s="", refresh=True):
        super().set_postfix_str(s, refresh)
        self._report()

    def close(self):
        if not getattr(self, "disable", False) and not getattr(self, "_closed_reported", False):
            self._closed_reported = True
            BOARD.clear_bar()
        super().close()

    def _report(self) -> None:
        if not getattr(self, "disable", False):  # a disabled bar has no state to report
            BOARD.record(self.desc or "", self.n, self.total, self.postfix)
