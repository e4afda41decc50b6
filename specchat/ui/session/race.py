"""The race of a chat session: the target alone, then the drafter, on one message. No gradio import.

:class:`SessionRace`, owned by :class:`specchat.ui.session.chat.ChatSession`, runs the
race (back to back, same settings and seed, each traced) and replays both runs at their
measured speeds; :mod:`specchat.ui.html.race` draws it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

from specchat.conversation import Conversation, ReplySettings, StreamFn
from specchat.core.events import DoneEvent, RoundEvent, TokenEvent
from specchat.drafters import kinds as drafter_kinds
from specchat.service_api import ChatServiceProtocol
from specchat.ui.html.race import RaceLane, race_html, race_verdict
from specchat.ui.html.render import status_html
from specchat.ui.session.queue import RunSlot
from specchat.ui.session.reply import Run, is_blank_message
from specchat.ui.session.views import SessionViews, View


class SessionRace:
    """The race of a :class:`~specchat.ui.session.chat.ChatSession`: it shares the session's one
    streaming slot (a reply and a race never run together) and its views (the last message sent).

    Args:
        service: the loaded service.
        stream: how a run is streamed (the session's; ZeroGPU's wrapper on Spaces).
        slot: the session's streaming run.
        views: the session's views (the last message sent, for :meth:`message_for`).
        resolve_drafter: "auto" → the measured pick (the session's rule).
        clock: seconds (tests pass a fake).
    """

    def __init__(self, service: ChatServiceProtocol, *, stream: StreamFn, slot: RunSlot, views: SessionViews,
                 resolve_drafter: Callable[[str], str], clock: Callable[[], float]):
        self.service = service
        self.stream = stream
        self.slot = slot
        self.views = views
        self.resolve_drafter = resolve_drafter
        self.clock = clock
        self.lanes: tuple[RaceLane, RaceLane] | None = None  # the last race's runs, to replay
        self.greedy = True
        self.stopped = threading.Event()  # Stop during a race's replay

    def message_for(self, typed: str | None) -> str | None:
        """What to race: the text in the message box, else the last message sent."""
        if typed and not is_blank_message(typed):
            return typed
        return self.views.exchanges[-1].message if self.views.exchanges else None

    def run(self, message: str | None, settings: ReplySettings) -> Iterator[View]:
        """Run ``message`` (a fresh single-turn chat) with the target only, then with
        ``settings.drafter``, back to back with the same settings and seed, each traced; the
        page shows only a short status meanwhile (drawing would slow the runs it times). Stop
        ends it. :meth:`replay` then plays them back at their measured speeds.

        Raises:
            ValueError: an out-of-range setting.
        """
        self.lanes = None
        if self.service.banner:  # a page that only replays trace files
            yield View(race=status_html("The race needs a model: start the app without --trace."))
            return
        if message is None or is_blank_message(message):
            yield View(race=status_html("Type a message (or send one) to race on."),
                       toasts=(("warning", "Type a message (or send one) to race on."),))
            return
        chosen = settings.drafter
        settings = dataclasses.replace(settings, drafter=self.resolve_drafter(chosen))  # "auto": the pick, resolved now
        if drafter_kinds.DRAFTER_KINDS.get(settings.drafter) is not None and drafter_kinds.get(settings.drafter).source == "none":
            yield View(race=status_html("Pick a drafter to race against the target alone."),
                       toasts=(("warning", "Pick a drafter to race against the target alone."),))
            return
        offered = self.service.drafter_kinds()
        if settings.drafter not in offered:  # checked before the target-only half runs
            why = f"drafter '{settings.drafter}' is not available for this target (available: {', '.join(offered)})"
            yield View(race=status_html(f"Cannot race: {why}."), toasts=(("warning", f"Cannot race: {why}."),))
            return
        base_settings = dataclasses.replace(settings, drafter="none")
        config = Conversation(trace=True).config(settings)  # a fresh single-turn chat; ValueError before anything runs
        run = Run()
        if not self.slot.claim(run):
            yield View(race=status_html("A reply is streaming: race when it has finished."),
                       toasts=(("warning", "A reply is streaming: race when it has finished."),))
            return
        self.stopped.clear()
        self.lanes, self.greedy = None, config.greedy
        lanes = (RaceLane("target only"), RaceLane(settings.drafter if chosen == settings.drafter
                                                   else f"{chosen} → {settings.drafter}"))
        try:
            for lane, lane_settings in zip(lanes, (base_settings, settings)):
                lane_config = dataclasses.replace(config, measure_speedup=False)  # the race itself is the measurement
                # both lanes prefill the whole prompt: the second must not reuse the first's cache
                self.service.forget_prefix()
                last = self.clock()
                yield View(race=race_html(*lanes, 0.0, status=f"running {lane.name}…"))
                for item in self.stream([], message, lane_settings.drafter, lane_config, run.cancel):
                    if isinstance(item, (TokenEvent, RoundEvent, DoneEvent)):
                        lane.add(item)
                    else:
                        lane.name = lane.name if not getattr(item, "fallback_drafter", None) else "none (drafter failed)"
                    now = self.clock()
                    if isinstance(item, RoundEvent) and now - last >= 1.0:
                        last = now
                        yield View(race=race_html(*lanes, 0.0, status=f"running {lane.name}: {len(lane.tokens)} tokens…"))
                if run.cancel.is_set():
                    yield View(race=race_html(*lanes, None, status="race stopped"))
                    return
            self.lanes = lanes
            yield View(race=race_html(*lanes, 0.0, status="both runs done: replaying them at their measured speeds…"))
        except Exception as exc:  # a failing model: say so
            yield View(race=race_html(*lanes, None, status=f"the race failed: {exc}"),
                       toasts=(("warning", f"The race failed: {exc}"),))
        finally:
            self.slot.release(run)

    def replay(self, frame_s: float = 0.1) -> Iterator[View]:
        """Play the last race back: both lanes side by side at their measured speeds (real
        time), then their final times and, at temperature 0, whether the texts are identical."""
        lanes = self.lanes
        if lanes is None:
            return
        total = max(lane.total_ms for lane in lanes)
        start = self.clock()
        while True:
            t_ms = (self.clock() - start) * 1000
            if t_ms >= total or self.lanes is not lanes or self.stopped.is_set():
                break
            yield View(race=race_html(*lanes, t_ms, status="replaying at the measured speeds"))
            time.sleep(frame_s)
        verdict = race_verdict(*lanes, greedy=self.greedy)
        yield View(race=race_html(*lanes, None, status="same prompt, same settings and seed, run back to back",
                                  verdict=verdict))
