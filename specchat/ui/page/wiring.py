"""The page's wiring: which event calls which handler, with which inputs and outputs.

:func:`build_ui` makes the whole app around a service: the layout (:mod:`specchat.ui.page.layout`)
inside a ``gr.Blocks``, then :func:`wire_events`, which attaches the listeners of :func:`events`
(data: one :class:`Event` each) to the methods of :class:`~specchat.ui.page.handlers.Handlers`. An
event's inputs and outputs are names: a :class:`~specchat.ui.session.view.View` field (its components on
the page, :data:`specchat.ui.page.layout.VIEW_OUTPUTS`) or a :class:`~specchat.ui.page.layout.Page`
attribute. The output lists that depend on when a View field is sent while a reply streams
(the stream's, the panel tick's, the reply's end's) are derived from the fields' policy
(:mod:`specchat.ui.session.view`), so a new panel needs no change here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from specchat.drafters import kinds as drafter_kinds
from specchat.service_api import ChatServiceProtocol
from specchat.ui.html.transcript import SET_PLAIN_JS, SET_REJECTED_JS
from specchat.ui.page.handlers import RESTORED, Handlers
from specchat.ui.page.host import stream_fn
from specchat.ui.page.layout import VIEW_OUTPUTS, Page, build_page
from specchat.ui.session.chat import AUTO, ChatSession, SessionStore
from specchat.ui.session.view import PANEL_FIELDS, STREAMED_FIELDS, TICKED_FIELDS

DRAFTER_CHOICES = drafter_kinds.KIND_NAMES  # the one table of drafter kinds (no torch import)


def _pick_drafter(kinds: list[str], preferred: str | None, runtime: str = "transformers") -> str:
    """``preferred`` when offered, else the first of the runtime's default order (the drafter at start)."""
    if preferred in kinds:
        return preferred
    for kind in drafter_kinds.default_order(runtime):
        if kind in kinds:
            return kind
    return kinds[0] if kinds else "none"


def build_ui(service: ChatServiceProtocol, *, default_drafter: str | None = None, trace_files: tuple[str, ...] = ()) -> gr.Blocks:
    """The whole app around ``service`` (anything with the ChatService interface): the layout,
    and events wired to the per-session logic of :class:`specchat.ui.session.chat.ChatSession`.

    Loads nothing itself: the service is loaded already, or loading in the background after
    ``service.start()`` (the page then shows its progress). Pass ``CSS`` to ``launch(css=…)``.
    The sessions are in ``demo.sessions`` (a :class:`~specchat.ui.session.chat.SessionStore`).
    """
    kinds = list(service.drafter_kinds())
    # "auto": the service picks the drafter by measurement while it loads (ChatService.pick_drafter);
    # until the pick is known the menu says "auto" (a message sent then waits for the pick and runs
    # with it, ChatSession), and each page shows the pick once the models are ready
    auto = default_drafter == "auto"
    picked = service.picked
    if auto and not picked:
        drafter0 = AUTO
    else:
        drafter0 = _pick_drafter(kinds, picked.drafter if auto and picked else default_drafter, service.runtime)
    sessions = SessionStore(lambda: ChatSession(service, stream=stream_fn(service)))
    with gr.Blocks(title="specchat · speculative decoding") as demo:
        page = build_page(service, kinds=kinds, drafter0=drafter0, auto=auto, picked=picked)
        wire_events(demo, page, service, sessions, kinds=kinds, drafter0=drafter0, auto=auto, trace_files=trace_files)
    demo.sessions = sessions
    return demo


# -- the events, as data ---------------------------------------------------------------------
QUIET = {"show_progress": "hidden"}
PRIVATE = {"api_visibility": "private"}  # not part of the API
FREE = {"concurrency_limit": None}  # runs at once, outside the model queue
MODEL = {"concurrency_limit": 1, "concurrency_id": "model"}  # the one model queue


def _fields(keep) -> tuple[str, ...]:
    """The View fields on the page (:data:`VIEW_OUTPUTS`, in /chat's output order) that ``keep`` keeps."""
    return tuple(name for name in VIEW_OUTPUTS if keep(name))


EVERYTHING = _fields(lambda f: True)  # /chat, an opened trace: every output
STREAMED = _fields(lambda f: f in STREAMED_FIELDS)  # a reply's stream on the page (the transcript, the stats line)
ASIDE = _fields(lambda f: f not in STREAMED_FIELDS)  # what that stream leaves to the panel tick and the reply's end
TICKED_OUTPUTS = _fields(lambda f: f in TICKED_FIELDS)  # what the panel tick draws
LIVE = _fields(lambda f: f in PANEL_FIELDS)  # the live panels, drawn when they come on screen
CLEARED = _fields(lambda f: f not in ("textbox", "race", "trace_file"))  # what Clear starts over
# another chat shown
CHAT_SWITCHED = (*CLEARED, "trace_file", "saved", "chats_saved", "chat_list", "undo_btn", "system_prompt", "export_file")
SELECTED = ("inspector", "timeline", "trace_file", "ledger", "worth", "figures")  # what a click on a token or round changes
# kept across a reload; the system prompt's box too, as typed (sent or not), restored with the conversation
KEPT_SETTINGS = ("drafter", "gamma", "temperature", "top_p", "max_new_tokens", "adaptive", "colours", "system_prompt")
SETTINGS = ("drafter", "gamma", "temperature", "top_p", "max_new_tokens", "adaptive", "system_prompt")  # a reply's


@dataclass(frozen=True)
class Event:
    """One listener: ``trigger`` is "COMPONENT.EVENT" (a Page attribute's event), "load" or
    "unload" (the page's); ``fn`` the :class:`~specchat.ui.page.handlers.Handlers` method (None: the
    ``js`` option alone); ``inputs`` and ``outputs`` names (a View field: its components, else a
    Page attribute; None: none); ``options`` Gradio's other arguments; ``then`` the listeners
    that follow it (``.then``)."""

    trigger: str | None
    fn: str | None
    inputs: tuple[str, ...] | None = None
    outputs: tuple[str, ...] | None = None
    options: dict = field(default_factory=dict)
    then: tuple[Event, ...] = ()


def on(trigger: str | None, fn: str | None, inputs: tuple[str, ...] | None = None, outputs: tuple[str, ...] | None = None,
       *, then: tuple[Event, ...] = (), **options: Any) -> Event:
    """An :class:`Event`, its Gradio options as keywords (``trigger`` None: it follows another, in its ``then``)."""
    return Event(trigger, fn, inputs, outputs, options, then)


def events(trace_files: bool) -> list[Event]:
    """The page's listeners, in the order they are attached (``trace_files``: ``app.py --trace``)."""
    reply = dict(**QUIET, **MODEL, trigger_mode="multiple")  # a message sent while another streams queues; "once" would drop it
    settle = on(None, "settle", None, (*ASIDE, "panel_tick", "save_tick", "saved", "chat_list", "chats_saved"), **QUIET, **FREE,
                **PRIVATE)
    respond = on(None, "respond_on_page", ("pending", *SETTINGS, "ticket"), STREAMED, **PRIVATE, **reply, then=(settle,))
    # sending: the box emptied at once (no concurrency limit), then the reply on the model queue, then
    # what its stream left aside
    taken = ("textbox", "pending", "ticket", "panel_tick", "saved", "save_tick", "undo_btn", "chat_list", "chats_saved",
             "editing", "transcript", "table", "stats", "export_file")  # what take_message changes
    send = [on(trigger, "take_message", ("textbox", "editing"), taken, **FREE, **QUIET, **PRIVATE, then=(respond,))
            for trigger in ("send.click", "textbox.submit")]
    # Regenerate and Continue send like a typed message (their handler gives the message and its ticket)
    resend = [on(trigger, fn, None, ("transcript", "pending", "ticket", "panel_tick", "saved", "save_tick"), **FREE, **QUIET,
                 **PRIVATE,
                 then=(respond,)) for trigger, fn in (("regenerate_btn.click", "regenerate"),
                                                       ("continue_btn.click", "continue_reply"))]
    return [
        *send,
        *resend,
        on("export_btn.click", "export_chat", None, ("export_file",), **FREE, **QUIET, **PRIVATE),
        on("panel_tick.tick", "tick", None, TICKED_OUTPUTS, **QUIET, **FREE, **PRIVATE),
        # while a reply streams: the browser's copy of the chat, every SAVE_INTERVAL_S (a reload keeps what streamed)
        on("save_tick.tick", "save_now", None, ("saved", "save_tick"), **QUIET, **FREE, **PRIVATE),
        on("api_chat.click", "respond", ("pending", *SETTINGS), EVERYTHING, api_name="chat", **reply),
        on("stop.click", "stop_generation", **FREE, **PRIVATE),
        # .select fires once per user choice (Gradio 6.31's Dropdown fires .input twice) and
        # not when prepare_drafter puts the previous value back after a failure
        on("drafter.select", "prepare_drafter", ("drafter", "active_drafter"), ("drafter_status", "drafter", "active_drafter"),
           **MODEL, **QUIET, api_name="prepare_drafter",
           trigger_mode="always_last"),  # picks made while one waits: the last one wins ("once" dropped them)
        # a second listener, outside the model queue: it runs at once, even while a reply streams
        on("drafter.select", "note_pick", **FREE, **QUIET, **PRIVATE),
        on("load_model_btn.click", "switch_model", ("model_menu",),
           ("load_banner", "subtitle", "model_menu", "drafter", "active_drafter", "drafter_status"), **MODEL, **QUIET,
           **PRIVATE),
        on("scope.input", "set_scope", ("scope",), ("figures",), **FREE, **QUIET, api_name="charts"),
        # every open tab polls the loading (no model work); the menu's value is read when loading
        # ends, after any pick made meanwhile
        on("load", "show_loading", None, ("load_banner", "subtitle", "model_menu"), **QUIET, **PRIVATE, **FREE, then=(
            on(None, "apply_startup_pick", ("drafter", "settings_saved"), ("drafter_status", "drafter", "active_drafter"),
               **QUIET, **PRIVATE, **FREE, then=(
                   on(None, "prepare_kept_drafter", ("drafter", "active_drafter"),
                      ("drafter_status", "drafter", "active_drafter"), **MODEL, **QUIET, **PRIVATE),)),)),
        # the settings this browser kept, restored on open; each change the user makes writes them
        # (.input: not the restore's own changes, nor the start-up pick's); the system prompt's box
        # on every change, a chat switched included (the kept value is what the box shows), into
        # the kept settings as they are (the controls may not be restored yet)
        on("load", "restore_settings", ("settings_saved",), KEPT_SETTINGS[1:-1], **QUIET, **PRIVATE, **FREE),
        # unchecked (preprocess=False): a slider's box sends each keystroke (48 sends 4 first) and
        # Gradio's range check would raise a toast; settings_state keeps the nearest value in range
        *[on(f"{name}.input", "keep_settings", KEPT_SETTINGS, ("settings_saved",), **QUIET, **PRIVATE, **FREE,
             preprocess=False)
          for name in KEPT_SETTINGS[:-1]],
        on("system_prompt.change", "keep_prompt", ("settings_saved", "system_prompt"), ("settings_saved",), **QUIET,
           **PRIVATE, **FREE),
        on("clear_btn.click", "clear", None, (*CLEARED, "saved", "undo_btn", "export_file"), **FREE, **PRIVATE),
        # several chats: the list restored on open; New, a switch, Delete, Undo show another chat
        on("load", "restore_chats", ("chats_saved", "saved"), ("chat_list", "chats_saved"), **QUIET, **PRIVATE, **FREE),
        *[on(trigger, fn, inputs, CHAT_SWITCHED, **QUIET, **PRIVATE, **FREE) for trigger, fn, inputs in (
            ("new_chat_btn.click", "new_chat", None), ("chat_list.input", "switch_chat", ("chat_list",)),
            ("delete_chat_btn.click", "delete_chat", None), ("undo_btn.click", "undo", None))],
        on("rename_box.submit", "rename_chat", ("rename_box",), ("chat_list", "chats_saved", "rename_box"), **QUIET,
           **PRIVATE, **FREE),
        on("unqueue.change", "cancel_queued", ("unqueue",), None, **FREE, **QUIET, **PRIVATE),
        # a page opened or reloaded shows the conversation this browser kept (none with --trace files)
        *([] if trace_files else [on("load", "restore", ("saved", "settings_saved"), (*RESTORED, "system_prompt", "saved"),
                                     **QUIET, **PRIVATE, **FREE)]),
        # colours / plain and the rejected drafts: classes on the transcript, switched in the browser
        on("colours.change", None, ("colours",), None, js=SET_PLAIN_JS, **PRIVATE),
        on("pick.change", "select", ("pick",), SELECTED, **FREE, **QUIET, **PRIVATE),
        on("panels.change", "set_panels", ("panels",), (*LIVE, "panel_tick"), **FREE, **QUIET, **PRIVATE),
        on("show_rejected.change", None, ("show_rejected",), None, js=SET_REJECTED_JS, **PRIVATE),
        on("pin.change", "set_pin", ("pin",), None, **FREE, **QUIET, **PRIVATE),
        on("upload.upload", "open_trace", ("upload",), EVERYTHING, **FREE, **QUIET, api_name="open_trace"),
        on("race_btn.click", "run_race", ("textbox", *SETTINGS), ("race",), **QUIET, **MODEL, api_name="race",
           then=(on(None, "replay_race", None, ("race",), **QUIET, **FREE, **PRIVATE),)),
        *([on("load", "open_startup_traces", None, EVERYTHING, **QUIET, **PRIVATE, **FREE)] if trace_files else []),
        on("unload", "drop_session"),
    ]


def wire_events(demo: gr.Blocks, page: Page, service: ChatServiceProtocol, sessions: SessionStore, *, kinds: list[str], drafter0: str,
                auto: bool, trace_files: tuple[str, ...] = ()) -> Handlers:
    """Attach the page's events (call inside ``demo``'s ``gr.Blocks``), :func:`events`, to a
    :class:`~specchat.ui.page.handlers.Handlers`: sending (instant, then the reply on the one model
    queue), Stop, Clear, the drafter menu, the charts' scope, clicks on tokens and rounds,
    rejected drafts, trace files, the race, and each page's load and unload. ``kinds``,
    ``drafter0`` and ``auto`` are :func:`build_ui`'s; ``trace_files`` open on every new page
    (``app.py --trace``). Returns the handlers."""
    handlers = Handlers(page, service, sessions, kinds=kinds, drafter0=drafter0, auto=auto, trace_files=trace_files)
    for event in events(bool(trace_files)):
        _attach(demo, page, handlers, event)
    return handlers


def _attach(demo: gr.Blocks, page: Page, handlers: Handlers, event: Event, after: Any = None) -> None:
    """Attach ``event`` (after the dependency ``after``, for a ``then``) and the events that follow it."""
    fn = getattr(handlers, event.fn) if event.fn is not None else None
    if event.trigger == "unload":
        demo.unload(fn)
        return
    if after is not None:
        listen = after.then
    elif event.trigger == "load":
        listen = demo.load
    else:
        component, name = event.trigger.split(".")
        listen = getattr(getattr(page, component), name)
    inputs = None if event.inputs is None else page.components(*event.inputs)
    outputs = None if event.outputs is None else page.components(*event.outputs)
    dependency = listen(fn=fn, inputs=inputs, outputs=outputs, **event.options)
    for nxt in event.then:
        _attach(demo, page, handlers, nxt, dependency)
