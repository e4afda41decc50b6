"""The page's wiring: what each click, send and page load does, wired to the sessions.

:func:`build_ui` makes the whole app around a service: the layout (:mod:`specchat.ui.layout`)
inside a ``gr.Blocks``, then :func:`wire_events`, whose handlers hold no logic: each finds the
browser session's :class:`~specchat.ui.session.ChatSession` and turns the
:class:`~specchat.ui.session_views.View` it returns into ``{component: value}`` updates.
"""

from __future__ import annotations

import threading
from typing import Any

import gradio as gr

from specchat.drafters import kinds as drafter_kinds
from specchat.ui.host import compile_note, loading_banner, stream_fn, wait_until_ready
from specchat.ui.layout import Page, build_page, drafter_menu
from specchat.ui.render import status_html
from specchat.ui.session import AUTO, ChatSession, ReplySettings, SessionStore, View
from specchat.ui.transcript import SET_PLAIN_JS, SET_REJECTED_JS, wire

DRAFTER_CHOICES = drafter_kinds.KIND_NAMES  # the one table of drafter kinds (no torch import)
TICKED = ("table", "figures", "timeline", "ledger", "worth")  # what the panel tick draws while a reply streams


def _pick_drafter(kinds: list[str], preferred: str | None, runtime: str = "transformers") -> str:
    """``preferred`` when offered, else the first of the runtime's default order (the drafter at start)."""
    if preferred in kinds:
        return preferred
    for kind in drafter_kinds.default_order(runtime):
        if kind in kinds:
            return kind
    return kinds[0] if kinds else "none"


def _toast(level: str, text: str) -> None:
    (gr.Warning if level == "warning" else gr.Info)(text)


def build_ui(service: Any, *, default_drafter: str | None = None, trace_files: tuple[str, ...] = ()) -> gr.Blocks:
    """The whole app around ``service`` (anything with the ChatService interface): the layout,
    and events wired to the per-session logic of :class:`specchat.ui.session.ChatSession`.

    Loads nothing itself: the service is loaded already, or loading in the background after
    ``service.start()`` (the page then shows its progress). Pass ``CSS`` to ``launch(css=…)``.
    The sessions are in ``demo.sessions`` (a :class:`~specchat.ui.session.SessionStore`).
    """
    kinds = list(service.drafter_kinds())
    # "auto": the service picks the drafter by measurement while it loads (ChatService.pick_drafter);
    # until the pick is known the menu says "auto" (a message sent then waits for the pick and runs
    # with it, ChatSession), and each page shows the pick once the models are ready
    auto = default_drafter == "auto"
    picked = getattr(service, "picked", None)
    if auto and not picked:
        drafter0 = AUTO
    else:
        drafter0 = _pick_drafter(kinds, picked[0] if auto and picked else default_drafter,
                                 getattr(service, "runtime", "transformers"))
    sessions = SessionStore(lambda: ChatSession(service, stream=stream_fn(service)))
    with gr.Blocks(title="specchat · speculative decoding") as demo:
        page = build_page(service, kinds=kinds, drafter0=drafter0, auto=auto, picked=picked)
        wire_events(demo, page, service, sessions, kinds=kinds, drafter0=drafter0, auto=auto, trace_files=trace_files)
    demo.sessions = sessions
    return demo


def wire_events(demo: gr.Blocks, page: Page, service: Any, sessions: SessionStore, *, kinds: list[str], drafter0: str,
                auto: bool, trace_files: tuple[str, ...] = ()) -> None:
    """Attach the page's events (call inside ``demo``'s ``gr.Blocks``): sending (instant, then
    the reply on the one model queue), Stop, Clear, the drafter menu, the charts' scope, clicks
    on tokens and rounds, rejected drafts, trace files, the race, and each page's load and
    unload. ``kinds``, ``drafter0`` and ``auto`` are :func:`build_ui`'s; ``trace_files`` open on
    every new page (``app.py --trace``)."""

    def session_of(request: gr.Request | None) -> ChatSession:
        return sessions.get(getattr(request, "session_hash", None))

    def updates(view: View) -> dict:
        """A session's View as ``{component: value}`` (parts it leaves alone are left out)."""
        for level, text in view.toasts:
            _toast(level, text)
        out: dict = {}
        transcript = wire(view.transcript) if view.transcript is not None else None
        for component, value in ((page.transcript, transcript), (page.stats, view.stats), (page.table, view.table),
                                 (page.textbox, view.textbox), (page.inspector, view.inspector),
                                 (page.timeline, view.timeline), (page.race, view.race)):
            if value is not None:
                out[component] = value
        if view.trace_file is not None:
            number = view.trace_file.rsplit("reply", 1)[-1].removesuffix(".jsonl")
            out[page.download] = gr.DownloadButton(f"Download trace (reply #{number})", value=view.trace_file)
        if view.figures is not None:
            out.update(zip(page.plots, view.figures))
        if view.ledger is not None:
            out[page.ledger] = view.ledger
        if view.worth is not None:
            out[page.plot_worth] = view.worth
        return out or {page.stats: gr.skip()}  # Gradio reads an empty dict as one value

    def take_message(message, request: gr.Request = None):
        """Sending, step 1 (instant: no concurrency limit): empty the box at once, so the user
        can type the next message while this one waits or streams; the message goes on in
        ``pending``; the panel tick starts if a live panel is on screen. If a reply is streaming,
        the message is shown in the chat, marked queued (the streaming reply's next update
        carries it: ChatSession.note_sent), and a toast says so."""
        session = session_of(request)
        queued = session.note_sent(message).waits
        if queued and message and message.strip():
            gr.Info("Your message is queued (in the chat, marked queued): it is sent when the current reply ends. "
                    "Its own cancel button withdraws it; Stop ends the reply and withdraws every queued message.")
        # the message is in the browser's copy at once: a reload before its reply keeps what was typed
        return "", message, gr.Timer(active=bool(session.views.panels_visible)), session.saved()

    def reply_settings(drafter, gamma, temperature, top_p, max_new_tokens, adaptive, system_prompt) -> ReplySettings:
        """The settings a reply or a race runs with, from the page's controls (in their input order)."""
        return ReplySettings(drafter, gamma, adaptive, temperature, top_p, max_new_tokens, str(system_prompt or ""))

    def reply_views(session, message, *controls):
        """One reply's Views (see ChatSession.respond); an out-of-range setting is a gr.Error."""
        settings = reply_settings(*controls)
        try:
            yield from session.respond(message, settings)
        except ValueError as exc:  # an out-of-range setting: only an API call can send one
            raise gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False) from exc

    def respond(message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True, system_prompt="",
                request: gr.Request = None):
        """The API's /chat: stream one reply, every output."""
        session = session_of(request)
        for view in reply_views(session, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive,
                                system_prompt):
            yield updates(view)

    def respond_on_page(message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True, system_prompt="",
                        request: gr.Request = None):
        """Sending, step 2: stream one reply, only its transcript and stats line; the other parts
        wait in the session (ChatSession.defer) for the panel tick and for ``settle``."""
        session = session_of(request)
        for view in reply_views(session, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive,
                                system_prompt):
            out = updates(session.defer(view))
            if page.stats in out or page.transcript in out:  # else nothing to send now
                yield out

    def tick(request: gr.Request = None):
        """The panel tick (every PLOT_INTERVAL_S while a reply streams and a live panel is on
        screen): the panels and the table its stream left aside."""
        out = updates(session_of(request).take_deferred(only=TICKED))
        return {k: v for k, v in out.items() if k is not page.stats} or {page.timeline: gr.skip()}

    def settle(request: gr.Request = None):
        """After a reply on the page: what its stream left aside (the table, the panels, the
        inspector, the trace, a message put back in the box); the tick stops unless another
        message waits (with a live panel on screen)."""
        session = session_of(request)
        out = {k: v for k, v in updates(session.take_deferred()).items() if k is not page.stats}
        return {**out, page.panel_tick: gr.Timer(active=session.busy and bool(session.views.panels_visible)),
                page.saved: session.saved()}  # the conversation, kept in the browser for a reload

    def stop_generation(request: gr.Request = None):
        """Stop: the reply ends after its current round; messages waiting behind it are cancelled."""
        said = session_of(request).stop()
        if said:
            gr.Info(said)

    def clear(request: gr.Request = None):
        session = session_of(request)
        return {**updates(session.clear()), page.saved: session.saved()}  # {}: the browser's copy emptied

    def cancel_queued(ref, request: gr.Request = None):
        """A queued message's cancel button (its exchange id, from the click hook)."""
        try:
            exchange_id = int((ref or "").split("|")[0])
        except ValueError:
            return
        gr.Info(session_of(request).cancel_queued(exchange_id))

    def restore(saved, request: gr.Request = None):
        """A page (re)opened: the conversation this browser kept (:meth:`ChatSession.restore`)."""
        session = session_of(request)
        view = session.restore(saved)
        if view is None:
            return {page.system_prompt: gr.skip()}
        shown = {k: v for k, v in updates(view).items() if k in (page.transcript, page.stats, page.table)}
        return {**shown, page.system_prompt: session.conversation.system_prompt}

    def set_pin(pinned, request: gr.Request = None):
        session_of(request).views.pinned = bool(pinned)

    def set_scope(choice, request: gr.Request = None):
        return updates(session_of(request).views.set_chart_scope(choice))

    def prepare_drafter(kind, active):
        """Load the chosen drafter (the target stays loaded) in a thread, showing its progress;
        on failure fall back to the active one. (No gr.Progress(track_tqdm=True): it patches
        tqdm globally and breaks bars that were created before, e.g. by the start-up thread.)"""
        errors: list[BaseException] = []
        if kind == AUTO:  # the start-up pick: loaded already, or still being measured
            picked = getattr(service, "picked", None)
            if not picked:
                yield {page.drafter_status: status_html("drafter: picking by measurement on this machine…"),
                       page.active_drafter: AUTO}
                return
            kind = picked[0]

        def work():
            try:
                service.prepare_drafter(kind)
            except Exception as exc:  # shown below
                errors.append(exc)

        worker = threading.Thread(target=work, name=f"prepare-{kind}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            if worker.is_alive():
                yield {page.drafter_status: loading_banner(f"Preparing drafter '{kind}'")}
        if errors:
            gr.Warning(f"Could not prepare drafter '{kind}': {errors[0]}")
            yield {page.drafter_status: status_html(f"drafter '{kind}' failed: {errors[0]}", error=True),
                   page.drafter: active, page.active_drafter: active}
            return
        # the dropdown is left alone: it shows the user's latest pick, which a queued later
        # pick ("always_last") reads when it runs; writing `kind` back would undo that pick
        yield {page.drafter_status: status_html(f"drafter '{kind}' ready{compile_note(service, kind)}"), page.active_drafter: kind}

    picked_here: set = set()  # pages (session hashes) where the user picked a drafter

    def note_pick(request: gr.Request = None):
        """The user picked a drafter on this page: the start-up pick must not overwrite it."""
        picked_here.add(getattr(request, "session_hash", None))

    def show_loading():
        """On page load: mirror the background loading progress until the models are ready
        (:func:`apply_startup_pick` follows)."""
        for banner in wait_until_ready(service):
            yield {page.load_banner: banner}
        if getattr(service, "startup_error", None) is None:  # else the last banner says what failed
            yield {page.load_banner: getattr(service, "banner", "")}

    def apply_startup_pick(current, request: gr.Request = None):
        """Once the models are ready: show the start-up drafter (the one picked by measurement,
        and why), or, if it failed to load, switch this page to target-only and say why. A
        drafter the user picked on this page while the models loaded stays picked, with that
        pick's own status line: ``current`` is the menu's value when loading ended (read then, so
        no event order can hide a pick), and :func:`note_pick` covers a pick of the menu's first
        value."""
        unchanged = {page.drafter_status: gr.skip()}  # Gradio needs one output at least
        if getattr(service, "startup_error", None) is not None:
            return unchanged
        if current not in (drafter0, AUTO) or (current != AUTO and getattr(request, "session_hash", None) in picked_here):
            return unchanged
        picked = getattr(service, "picked", None) if auto else None
        first = picked[0] if picked and picked[0] in kinds else drafter0
        error = getattr(service, "drafter_errors", {}).get(first)
        if error is not None:
            text = f"drafter '{first}' could not be loaded ({error}): answering with the target only"
            gr.Warning(text)
            return {page.drafter_status: status_html(text, error=True), page.drafter: "none", page.active_drafter: "none"}
        why = f" · picked by measurement: {picked[1]}" if picked else ""
        why += compile_note(service, first)
        menu = gr.Dropdown(choices=drafter_menu(service, kinds, auto), **({"value": first} if picked else {}))
        return {page.drafter_status: status_html(f"drafter '{first}' ready{why}"), page.drafter: menu,
                **({page.active_drafter: first} if picked else {})}

    def select(ref, request: gr.Request = None):
        try:
            return updates(session_of(request).views.select((ref or "").split("|")[0]))
        except ValueError:
            return {page.inspector: gr.skip()}

    def set_panels(seen, request: gr.Request = None):
        """The page says which live panels are on screen ("charts,ledger,timeline"): those that
        changed while off screen are drawn now."""
        session = session_of(request)
        out = updates(session.views.show_panels(set((seen or "").split(","))))
        # the panel tick runs while a reply streams and a live panel is on screen
        return {**{k: v for k, v in out.items() if k is not page.stats},
                page.panel_tick: gr.Timer(active=bool(session.views.panels_visible) and session.busy)}

    def open_trace(file, request: gr.Request = None):
        from specchat.analysis.trace import TraceError

        path = getattr(file, "name", file)
        try:
            return updates(session_of(request).open_trace(path))
        except (TraceError, OSError, UnicodeDecodeError) as exc:
            raise gr.Error(f"Could not open the trace: {exc}", title="Not a trace", print_exception=False) from exc

    def run_race(message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True, system_prompt="",
                 request: gr.Request = None):
        session = session_of(request)
        settings = reply_settings(drafter, gamma, temperature, top_p, max_new_tokens, adaptive, system_prompt)
        try:
            for view in session.race.run(session.race.message_for(message), settings):
                yield {k: v for k, v in updates(view).items() if k is page.race} or {page.race: gr.skip()}
        except ValueError as exc:
            raise gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False) from exc

    def replay_race(request: gr.Request = None):
        yield {page.race: gr.skip()}  # nothing to replay (a refused or stopped race) leaves the panel as it is
        for view in session_of(request).race.replay():
            yield {page.race: view.race}

    def open_startup_traces(request: gr.Request = None):
        """``app.py --trace FILE``: each new page opens the files given."""
        session = session_of(request)
        view = None
        if not session.views.exchanges:
            for path in trace_files:
                view = session.open_trace(path)
        return updates(view) if view is not None else {page.inspector: gr.skip()}

    def drop_session(request: gr.Request = None):
        sessions.drop(getattr(request, "session_hash", None))
        picked_here.discard(getattr(request, "session_hash", None))

    inside = [page.inspector, page.timeline, page.race, page.download, page.ledger, page.plot_worth]
    everything = [page.textbox, page.transcript, page.stats, page.table, *page.plots, *inside]
    settings = [page.drafter, page.gamma, page.temperature, page.top_p, page.max_new_tokens, page.adaptive,
                page.system_prompt]  # a reply's
    common = dict(
        inputs=[page.pending, *settings], show_progress="hidden", concurrency_limit=1, concurrency_id="model",
        trigger_mode="multiple",  # a message sent while another streams queues; "once" would drop it
    )
    take = dict(
        fn=take_message, inputs=[page.textbox], outputs=[page.textbox, page.pending, page.panel_tick, page.saved],
        concurrency_limit=None, show_progress="hidden", api_visibility="private",
    )
    aside = [page.textbox, page.table, *page.plots, *inside]  # what the page's stream leaves to tick/settle
    for trigger in (page.send.click, page.textbox.submit):
        trigger(**take).then(
            respond_on_page, outputs=[page.transcript, page.stats], api_visibility="private", **common,
        ).then(settle, None, [*aside, page.panel_tick, page.saved], show_progress="hidden", concurrency_limit=None,
               api_visibility="private")
    page.panel_tick.tick(tick, None, [page.table, *page.plots, page.timeline, page.ledger, page.plot_worth],
                         show_progress="hidden", concurrency_limit=None, api_visibility="private")
    page.api_chat.click(respond, outputs=everything, api_name="chat", **common)
    page.stop.click(stop_generation, None, None, concurrency_limit=None, api_visibility="private")
    # .select fires once per user choice (Gradio 6.31's Dropdown fires .input twice) and
    # not when prepare_drafter puts the previous value back after a failure
    page.drafter.select(
        prepare_drafter, inputs=[page.drafter, page.active_drafter],
        outputs=[page.drafter_status, page.drafter, page.active_drafter],
        concurrency_limit=1, concurrency_id="model", show_progress="hidden",
        trigger_mode="always_last",  # picks made while one waits: the last one wins ("once" dropped them)
        api_name="prepare_drafter",
    )
    # a second listener, outside the model queue: it runs at once, even while a reply streams
    page.drafter.select(note_pick, None, None, concurrency_limit=None, show_progress="hidden", api_visibility="private")
    page.scope.input(set_scope, inputs=[page.scope], outputs=list(page.plots), concurrency_limit=None,
                     show_progress="hidden", api_name="charts")
    demo.load(
        show_loading, None, [page.load_banner], show_progress="hidden", api_visibility="private",
        concurrency_limit=None,  # every open tab polls; no model work happens here
    ).then(  # the menu's value is read when loading ends, after any pick made meanwhile
        apply_startup_pick, [page.drafter], [page.drafter_status, page.drafter, page.active_drafter],
        show_progress="hidden", api_visibility="private", concurrency_limit=None,
    )
    cleared = [page.transcript, page.stats, page.table, *page.plots, page.inspector, page.timeline, page.ledger,
               page.plot_worth]
    page.clear_btn.click(clear, None, [*cleared, page.saved], concurrency_limit=None, api_visibility="private")
    page.unqueue.change(cancel_queued, [page.unqueue], None, concurrency_limit=None, show_progress="hidden",
                        api_visibility="private")
    # a page opened or reloaded shows the conversation this browser kept (none with --trace files)
    if not trace_files:
        demo.load(restore, [page.saved], [page.transcript, page.stats, page.table, page.system_prompt],
                  show_progress="hidden", api_visibility="private", concurrency_limit=None)
    # colours / plain and the rejected drafts: classes on the transcript, switched in the browser
    page.colours.change(None, [page.colours], None, js=SET_PLAIN_JS, api_visibility="private")
    page.pick.change(select, inputs=[page.pick],
                     outputs=[page.inspector, page.timeline, page.download, page.ledger, page.plot_worth, *page.plots],
                     concurrency_limit=None, show_progress="hidden", api_visibility="private")
    page.panels.change(set_panels, inputs=[page.panels],
                       outputs=[*page.plots, page.timeline, page.ledger, page.plot_worth, page.panel_tick],
                       concurrency_limit=None, show_progress="hidden", api_visibility="private")
    page.show_rejected.change(None, [page.show_rejected], None, js=SET_REJECTED_JS, api_visibility="private")
    page.pin.change(set_pin, [page.pin], None, concurrency_limit=None, show_progress="hidden", api_visibility="private")
    page.upload.upload(open_trace, inputs=[page.upload], outputs=everything, concurrency_limit=None,
                       show_progress="hidden", api_name="open_trace")
    page.race_btn.click(
        run_race, inputs=[page.textbox, *settings],
        outputs=[page.race], show_progress="hidden", concurrency_limit=1, concurrency_id="model", api_name="race",
    ).then(replay_race, None, [page.race], show_progress="hidden", concurrency_limit=None, api_visibility="private")
    if trace_files:
        demo.load(open_startup_traces, None, everything, show_progress="hidden", api_visibility="private",
                  concurrency_limit=None)
    demo.unload(drop_session)
