"""What each event of the page does: :class:`Handlers`, one method per listener, wired by
:mod:`specchat.ui.page.wiring` (which event calls which method, with which inputs and outputs).

The handlers hold no logic: each finds the browser session's :class:`~specchat.ui.session.chat.ChatSession` and turns
the View it returns into ``{component: value}`` updates (:meth:`Handlers.updates`, through ``layout.VIEW_OUTPUTS``).
"""

from __future__ import annotations

import html
import json
import tempfile
import threading
from pathlib import Path

import gradio as gr

from specchat.service_api import ChatServiceProtocol
from specchat.ui.html.render import status_html
from specchat.ui.html.transcript import wire
from specchat.ui.page.host import compile_note, loading_banner, loading_html, wait_until_ready
from specchat.ui.page.layout import VIEW_OUTPUTS, Page, drafter_menu, header_md, model_choices
from specchat.ui.session.chat import AUTO, ChatSession, ReplySettings, SessionStore
from specchat.ui.session.chats import ChatShelf
from specchat.ui.session.export import export_json, export_markdown
from specchat.ui.session.last_reply import Resend
from specchat.ui.session.live import LIVE
from specchat.ui.session.saved import SETTING_RANGES, kept_prompt, parse_saved, parse_settings, settings_state
from specchat.ui.session.view import STREAMED_FIELDS, TICKED_FIELDS, View

NOTHING_SENT = -1  # the ticket of a refused Regenerate or Continue: the reply that follows does nothing
RESTORED = ("transcript", "stats", "table", "figures")  # what a reopened page shows of the conversation its browser kept
EXPORT_GONE = gr.File(visible=False)  # the export files offered, hidden once the chat changes (sent, cleared, switched)


def _toast(level: str, text: str) -> None:
    (gr.Warning if level == "warning" else gr.Info)(text)


def _invalid_setting(exc: ValueError) -> gr.Error:
    return gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False)


class Handlers:
    """The page's event handlers around one service and its sessions (made by
    :func:`specchat.ui.page.wiring.wire_events`). ``kinds``, ``drafter0`` and ``auto`` are
    :func:`~specchat.ui.page.wiring.build_ui`'s; ``trace_files`` open on every new page (``app.py --trace``)."""

    def __init__(self, page: Page, service: ChatServiceProtocol, sessions: SessionStore, *, kinds: list[str], drafter0: str,
                 auto: bool, trace_files: tuple[str, ...] = ()) -> None:
        self.page, self.service, self.sessions = page, service, sessions
        self.kinds, self.drafter0, self.auto, self.trace_files = kinds, drafter0, auto, trace_files
        self.picked_here: set = set()  # pages (session hashes) where the user picked a drafter
        # the components a reply's stream updates (the transcript and the stats line)
        self.streamed = tuple(page.components(*(f for f in VIEW_OUTPUTS if f in STREAMED_FIELDS)))
        self.restored = tuple(page.components(*RESTORED))

    def session_of(self, request: gr.Request | None) -> ChatSession:
        return self.sessions.get(getattr(request, "session_hash", None))

    def updates(self, view: View) -> dict:
        """A session's View as ``{component: value}`` (parts it leaves alone are left out); its toasts shown."""
        for level, text in view.toasts:
            _toast(level, text)
        return self.page.shown(view) or {self.page.stats: gr.skip()}  # Gradio reads an empty dict as one value

    def _panels_only(self, view: View) -> dict:
        """``view``'s updates without the stats line (the placeholder of an empty update)."""
        return {k: v for k, v in self.updates(view).items() if k is not self.page.stats}

    # -- sending a message --------------------------------------------------------------------
    def take_message(self, message, editing="", request: gr.Request = None):
        """Sending, step 1 (instant: no concurrency limit): empty the box at once, so the user
        can type the next message while this one waits or streams; the message goes on in
        ``pending``, its id in ``ticket``; the panel tick starts if a live panel is on screen. If a reply is streaming,
        the message is shown in the chat, marked queued with its own cancel button (the streaming
        reply's next update carries it: ChatSession.note_sent). No toast: one covered Stop or the
        drafter menu on a scrolled narrow page, and the chat already says it. ``editing``: the id
        of the exchange whose message ↑ or Edit put into the box (keys.js); it is taken back
        first and this message sent in its place (:meth:`LastReply.edit`)."""
        session = self.session_of(request)
        out = {self.page.editing: "", self.page.export_file: EXPORT_GONE}  # an export of the chat before is stale
        if str(editing or "").isdigit() and str(message or "").strip():
            out |= self.updates(session.last.edit(int(editing)))  # (its textbox, the old text, is emptied below)
        sent = session.note_sent(message)
        # the message is in the browser's copy at once: a reload before its reply keeps what was typed
        saved = session.saved()
        session.shelf.note_active(saved)  # a new chat is named after its first message at once
        return {**out, self.page.textbox: "", self.page.pending: message, self.page.ticket: sent.ticket,
                self.page.panel_tick: gr.Timer(active=bool(session.views.panels_visible)), self.page.saved: saved,
                self.page.save_tick: gr.Timer(active=True),
                self.page.undo_btn: gr.Button(visible=session.shelf.undo is not None), **self._chat_list(session)}

    # -- the last reply: Regenerate, Edit, Continue; the export -------------------------------------
    def regenerate(self, request: gr.Request = None):
        """Regenerate: the last message sent again (then ``respond_on_page``, as a typed one)."""
        session = self.session_of(request)
        return self._resend(session, session.last.regenerate())

    def continue_reply(self, request: gr.Request = None):
        """Continue: the last reply written on from its end (then ``respond_on_page``)."""
        session = self.session_of(request)
        return self._resend(session, session.last.continue_())

    def _resend(self, session: ChatSession, resend: Resend) -> dict:
        page = self.page
        if resend.message is not None:
            session.shelf.expire_undo()
        for level, text in resend.view.toasts:
            _toast(level, text)
        if resend.message is None:  # refused (the toast says why): respond_on_page does nothing
            return {page.pending: "", page.ticket: NOTHING_SENT}
        return {page.transcript: wire(resend.view.transcript), page.pending: resend.message, page.ticket: resend.ticket,
                page.panel_tick: gr.Timer(active=bool(session.views.panels_visible)), page.saved: session.saved(),
                page.save_tick: gr.Timer(active=True)}

    def export_chat(self, request: gr.Request = None):
        """Export: the conversation as a Markdown and a JSON file, offered for download."""
        session = self.session_of(request)
        if not session.views.exchanges:
            gr.Info("There is nothing to export yet.")
            return gr.File(visible=False)
        data = export_json(session.views, session.conversation, target=self.service.target_name,
                           title=session.shelf.current.title)
        folder = Path(tempfile.mkdtemp(prefix="specchat-export-"))
        stamp = data["exported_at"][:19].replace(":", "-")
        md, js = folder / f"specchat-chat-{stamp}.md", folder / f"specchat-chat-{stamp}.json"
        md.write_text(export_markdown(data), encoding="utf-8")
        js.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        return gr.File(value=[str(md), str(js)], visible=True)

    @staticmethod
    def reply_settings(drafter, gamma, temperature, top_p, max_new_tokens, adaptive, system_prompt) -> ReplySettings:
        """The settings a reply or a race runs with, from the page's controls (in their input order)."""
        return ReplySettings.from_controls(drafter, gamma, temperature, top_p, max_new_tokens, adaptive, system_prompt)

    def reply_views(self, session, message, *controls, ticket: int | None = None):
        """One reply's Views (see ChatSession.respond); an out-of-range setting is a gr.Error."""
        settings = self.reply_settings(*controls)
        try:
            yield from session.respond(message, settings, ticket)
        except ValueError as exc:  # an out-of-range setting: only an API call can send one
            raise _invalid_setting(exc) from exc

    def respond(self, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True, system_prompt="",
                request: gr.Request = None):
        """The API's /chat: stream one reply, every output."""
        session = self.session_of(request)
        for view in self.reply_views(session, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive,
                                     system_prompt):
            yield self.updates(view)

    def respond_on_page(self, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True,
                        system_prompt="", ticket=None, request: gr.Request = None):
        """Sending, step 2: stream one reply (``ticket``: the message's id from step 1), only its
        transcript and stats line; the other parts wait in the session (ChatSession.defer) for the
        panel tick and for ``settle``."""
        if ticket is not None and int(ticket) == NOTHING_SENT:  # a refused Regenerate or Continue
            yield {self.page.stats: gr.skip()}
            return
        session, transcript = self.session_of(request), self.page.transcript
        with LIVE.channel() as channel:  # the reply's text past Gradio's stream while the page reads it (session.live)
            for view in self.reply_views(session, message, drafter, gamma, temperature, top_p, max_new_tokens,
                                         adaptive, system_prompt, ticket=None if ticket is None else int(ticket)):
                out = self.updates(session.defer(view))
                if view.streaming and transcript in out:  # the stats line rides with the text (transcript.js setStats)
                    value = out.pop(transcript) | ({} if view.stats is None else {"stats": out.pop(self.page.stats)})
                    if (value := channel.offer(value)) is not None:
                        out[transcript] = value
                if any(c in out for c in self.streamed):  # else nothing to send now
                    yield out

    def save_now(self, request: gr.Request = None):
        """The save tick (every SAVE_INTERVAL_S while a reply streams or a message waits): the
        browser's copy of the chat, so that a reload keeps what streamed. An event of its own: as
        an output of the reply's stream, the copy slowed the page by a quarter (bench-page, docs/BENCHMARKS.md)."""
        session = self.session_of(request)
        if not session.busy:
            return {self.page.save_tick: gr.Timer(active=False)}
        return {self.page.saved: session.saved(), self.page.save_tick: gr.skip()}

    def tick(self, request: gr.Request = None):
        """The panel tick (every PLOT_INTERVAL_S while a reply streams and a live panel is on
        screen): the panels and the table its stream left aside."""
        return self._panels_only(self.session_of(request).take_deferred(only=TICKED_FIELDS)) or {
            self.page.timeline: gr.skip()}

    def settle(self, request: gr.Request = None):
        """After a reply on the page: what its stream left aside (the table, the panels, the
        inspector, the trace, a message put back in the box); the tick stops unless another
        message waits (with a live panel on screen)."""
        session = self.session_of(request)
        out = self._panels_only(session.take_deferred())
        saved = session.saved()
        session.shelf.note_active(saved)  # a new chat's title: its first message
        return {**out, self.page.panel_tick: gr.Timer(active=session.busy and bool(session.views.panels_visible)),
                self.page.save_tick: gr.Timer(active=session.busy),
                self.page.saved: saved, **self._chat_list(session)}  # the conversation, kept in the browser for a reload

    def stop_generation(self, request: gr.Request = None):
        """Stop: the reply ends after its current round; messages waiting behind it are cancelled."""
        said = self.session_of(request).stop()
        if said:
            gr.Info(said)

    def clear(self, request: gr.Request = None):
        session = self.session_of(request)
        return {**self.updates(session.clear()), self.page.saved: session.saved(),  # {}: the browser's copy emptied
                self.page.undo_btn: gr.Button(visible=session.shelf.undo is not None), self.page.export_file: EXPORT_GONE}

    # -- several chats --------------------------------------------------------------------------
    def restore_chats(self, chats, saved, request: gr.Request = None):
        """A page (re)opened: the list of chats this browser kept (the active one's title from its copy)."""
        session = self.session_of(request)
        session.shelf = ChatShelf.parse(chats)
        try:
            valid = parse_saved(saved) is not None
        except ValueError:
            valid = False
        session.shelf.note_active(saved if valid else {})
        return self._chat_list(session)

    def _chat_list(self, session: ChatSession) -> dict:
        shelf = session.shelf
        return {self.page.chat_list: gr.Radio(choices=shelf.choices(), value=shelf.active),
                self.page.chats_saved: shelf.state()}

    def _chat_switched(self, session: ChatSession, view: View | None) -> dict:
        """After New, a switch, Delete or Undo: the chat shown, its copy, the list; a refusal says why."""
        if view is None:
            if session.busy:
                gr.Info("Wait for the reply to end (or Stop it) before changing chats.")
            return {self.page.chat_list: gr.Radio(value=session.shelf.active)}
        # the chat's own trace download (a chat kept live in this tab has its replies' traces), or none
        trace = {self.page.download: gr.DownloadButton("Download trace", value=None)} if view.trace_file is None else {}
        return {**self.updates(view), **trace, self.page.saved: session.saved(), **self._chat_list(session),
                self.page.undo_btn: gr.Button(visible=session.shelf.undo is not None),
                self.page.system_prompt: session.conversation.system_prompt, self.page.export_file: EXPORT_GONE}

    def new_chat(self, request: gr.Request = None):
        """New chat: an empty one, its system prompt too (the box shows each chat's own)."""
        session = self.session_of(request)
        return self._chat_switched(session, session.new_chat())

    def switch_chat(self, chat_id, request: gr.Request = None):
        session = self.session_of(request)
        return self._chat_switched(session, session.switch_chat(str(chat_id or "")))

    def delete_chat(self, request: gr.Request = None):
        session = self.session_of(request)
        view = session.delete_chat()
        if view is not None:
            gr.Info("Chat deleted: Undo brings it back.")
        return self._chat_switched(session, view)

    def undo(self, request: gr.Request = None):
        session = self.session_of(request)
        return self._chat_switched(session, session.undo())

    def rename_chat(self, title, request: gr.Request = None):
        session = self.session_of(request)
        if not session.shelf.rename(str(title or "")):
            gr.Warning("A chat's name is at most 200 characters.")
            return {self.page.rename_box: gr.skip()}
        session.shelf.note_active(session.saved())
        return {**self._chat_list(session), self.page.rename_box: ""}

    def cancel_queued(self, ref, request: gr.Request = None):
        """A queued message's cancel button (its exchange id, from the click hook)."""
        try:
            exchange_id = int((ref or "").split("|")[0])
        except ValueError:
            return
        gr.Info(self.session_of(request).cancel_queued(exchange_id))

    def restore(self, saved, settings=None, request: gr.Request = None):
        """A page (re)opened: the conversation this browser kept (:meth:`ChatSession.restore`), or
        the fresher one its last session held (:meth:`SessionStore.freshest`: a reload mid-reply
        keeps the reply's last words), written back into the browser; the system prompt's box as
        it was left (``settings``, even unsent), else the restored conversation's."""
        session = self.session_of(request)
        view = session.restore(self.sessions.freshest(saved, session))
        typed = parse_settings(settings, self._menu_values()).get("system_prompt")
        prompt = typed if typed is not None else (gr.skip() if view is None else session.conversation.system_prompt)
        shown = {} if view is None else {k: v for k, v in self.updates(view).items() if k in self.restored}
        return {**shown, self.page.system_prompt: prompt, self.page.saved: gr.skip() if view is None else session.saved()}

    # -- the controls, the clicks and the panels ------------------------------------------------
    def set_pin(self, pinned, request: gr.Request = None):
        self.session_of(request).views.pinned = bool(pinned)

    def set_scope(self, choice, request: gr.Request = None):
        return self.updates(self.session_of(request).views.set_chart_scope(choice))

    def select(self, ref, request: gr.Request = None):
        try:
            return self.updates(self.session_of(request).views.select((ref or "").split("|")[0]))
        except ValueError:
            return {self.page.inspector: gr.skip()}

    def set_panels(self, seen, request: gr.Request = None):
        """The page says which live panels are on screen ("charts,ledger,timeline"): those that
        changed while off screen are drawn now."""
        session = self.session_of(request)
        out = self._panels_only(session.views.show_panels(set((seen or "").split(","))))
        # the panel tick runs while a reply streams and a live panel is on screen
        return {**out, self.page.panel_tick: gr.Timer(active=bool(session.views.panels_visible) and session.busy)}

    def open_trace(self, file, request: gr.Request = None):
        from specchat.analysis.trace import TraceError

        path = getattr(file, "name", file)
        try:
            return self.updates(self.session_of(request).open_trace(path))
        except (TraceError, OSError, UnicodeDecodeError) as exc:
            raise gr.Error(f"Could not open the trace: {exc}", title="Not a trace", print_exception=False) from exc

    def run_race(self, message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True, system_prompt="",
                 request: gr.Request = None):
        session, race = self.session_of(request), self.page.race
        settings = self.reply_settings(drafter, gamma, temperature, top_p, max_new_tokens, adaptive, system_prompt)
        try:
            for view in session.race.run(session.race.message_for(message), settings):
                yield {k: v for k, v in self.updates(view).items() if k is race} or {race: gr.skip()}
        except ValueError as exc:
            raise _invalid_setting(exc) from exc

    def replay_race(self, request: gr.Request = None):
        yield {self.page.race: gr.skip()}  # nothing to replay (a refused or stopped race) leaves the panel as it is
        for view in self.session_of(request).race.replay():
            yield {self.page.race: view.race}

    # -- the drafter ----------------------------------------------------------------------------
    def prepare_drafter(self, kind, active):
        """Load the chosen drafter (the target stays loaded) in a thread, showing its progress;
        on failure fall back to the active one. (No gr.Progress(track_tqdm=True): it patches
        tqdm globally and breaks bars that were created before, e.g. by the start-up thread.)"""
        page, service = self.page, self.service
        errors: list[BaseException] = []
        if kind == AUTO:  # the start-up pick: loaded already, or still being measured
            picked = service.picked
            if not picked:
                yield {page.drafter_status: status_html("drafter: picking by measurement on this machine…"),
                       page.active_drafter: AUTO}
                return
            kind = picked.drafter

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
        yield {page.drafter_status: status_html(f"drafter '{kind}' ready{compile_note(service, kind)}"),
               page.active_drafter: kind}

    def note_pick(self, request: gr.Request = None):
        """The user picked a drafter on this page: the start-up pick must not overwrite it."""
        self.picked_here.add(getattr(request, "session_hash", None))

    def show_loading(self):
        """On page load: mirror the background loading progress until the models are ready
        (:meth:`apply_startup_pick` follows); then the model's name, in the header and the model
        menu (a page opened after a switch from another page names the model loaded now)."""
        page, service = self.page, self.service
        for banner in wait_until_ready(service):
            yield {page.load_banner: banner}
        if service.startup_error is None:  # else the last banner says what failed
            yield {page.load_banner: service.banner, page.subtitle: header_md(service.target_name),
                   page.model_menu: gr.Dropdown(choices=model_choices(service.target_name), value=service.target_name)}

    # -- the settings kept in the browser ---------------------------------------------------------
    def keep_settings(self, drafter, gamma, temperature, top_p, max_new_tokens, adaptive, colours, system_prompt=""):
        """A control changed: the page's settings, written into the browser (restored on a reload)."""
        return settings_state({name: value for name, value in locals().items() if name != "self"})

    keep_prompt = staticmethod(kept_prompt)  # the system prompt's box changed (typed, or a chat shown)

    def restore_settings(self, saved):
        """A page (re)opened: the settings this browser kept, each that passes its check
        (:func:`~specchat.ui.session.saved.parse_settings`); the drafter is restored once the models
        are ready (:meth:`apply_startup_pick`)."""
        kept = parse_settings(saved, self._menu_values())
        # every control gets a value (its default when none was kept): an output left out is a
        # props update, which makes Gradio rebuild the slider and drop its range check (layout.bounded)
        names = [n for n in SETTING_RANGES if n not in ("drafter", "system_prompt")]  # the listener's outputs
        return {getattr(self.page, n): kept.get(n, getattr(self.page, n).value) for n in names}

    def _menu_values(self) -> list[str]:
        """The drafter menu's values: the kinds, and "auto" when the app picks by measurement."""
        return [*self.kinds, *([AUTO] if self.auto else [])]

    def prepare_kept_drafter(self, kind, active):
        """After :meth:`apply_startup_pick`: the drafter restored from this browser's settings,
        prepared as a pick from the menu is (nothing to do when it is the active one)."""
        if kind == active:
            yield {self.page.drafter_status: gr.skip()}
            return
        yield from self.prepare_drafter(kind, active)

    def apply_startup_pick(self, current, saved=None, request: gr.Request = None):
        """Once the models are ready: show the start-up drafter (the one picked by measurement,
        and why), or, if it failed to load, switch this page to target-only and say why. A
        drafter the user picked on this page while the models loaded stays picked, with that
        pick's own status line: ``current`` is the menu's value when loading ended (read then, so
        no event order can hide a pick), and :meth:`note_pick` covers a pick of the menu's first
        value."""
        page, service, drafter0 = self.page, self.service, self.drafter0
        unchanged = {page.drafter_status: gr.skip()}  # Gradio needs one output at least
        if service.startup_error is not None:
            return unchanged
        kept = parse_settings(saved, self._menu_values()).get("drafter")
        here = getattr(request, "session_hash", None)
        if kept is not None and kept != current and current in (drafter0, AUTO) and here not in self.picked_here:
            # the drafter this browser used last is this page's pick; prepare_kept_drafter loads it
            self.picked_here.add(here)
            menu = gr.Dropdown(choices=drafter_menu(service, self.kinds, self.auto), value=kept)
            return {page.drafter_status: status_html(f"drafter '{kept}' (your last choice): preparing…"), page.drafter: menu}
        if current not in (drafter0, AUTO) or (
                current != AUTO and getattr(request, "session_hash", None) in self.picked_here):
            return unchanged
        picked = service.picked if self.auto else None
        first = picked.drafter if picked and picked.drafter in self.kinds else drafter0
        error = service.drafter_errors.get(first)
        if error is not None:
            text = f"drafter '{first}' could not be loaded ({error}): answering with the target only"
            gr.Warning(text)
            return {page.drafter_status: status_html(text, error=True), page.drafter: "none", page.active_drafter: "none"}
        why = f" · picked by measurement: {picked.why}" if picked else ""
        why += compile_note(service, first)
        menu = gr.Dropdown(choices=drafter_menu(service, self.kinds, self.auto), **({"value": first} if picked else {}))
        return {page.drafter_status: status_html(f"drafter '{first}' ready{why}"), page.drafter: menu,
                **({page.active_drafter: first} if picked else {})}

    # -- the model ------------------------------------------------------------------------------
    def switch_model(self, target, request: gr.Request = None):
        """Load another target (the model menu), on the model queue (no reply runs meanwhile):
        the loading shown as at start, then the drafter picked by measurement for it. Every
        open page's chat goes on with it (the conversation is text; the new model reads it)."""
        page, service = self.page, self.service
        target = str(target or "").strip()
        if not target or target == service.target_name:
            gr.Info(f"{service.target_name} is the model loaded." if target else "Pick or type a model first.")
            yield {page.model_menu: gr.skip()}
            return
        from specchat.errors import SpecchatError
        from specchat.runtimes.registry import RegistryError

        errors: list[BaseException] = []

        def retarget() -> None:  # loads the new target before letting the old one go (ChatService.retarget)
            try:
                service.retarget(target)
            except Exception as exc:  # shown below
                errors.append(exc)

        worker = threading.Thread(target=retarget, name="specchat-retarget", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            yield {page.load_banner: loading_banner(f"Loading {target}")}
        if errors:
            known = isinstance(errors[0], (RegistryError, ValueError, SpecchatError, OSError))
            gr.Warning(html.escape(f"Cannot load {target}: {errors[0]}"  # a toast is HTML: a path or "<hub id>" as typed
                                   + ("" if known else f" ({type(errors[0]).__name__})")
                                   + f". {service.target_name} stays loaded."))
            yield {page.model_menu: service.target_name, page.load_banner: service.banner}
            return
        service.start(AUTO)
        self.kinds, self.auto = list(service.drafter_kinds()), True
        waiting = status_html("drafter: picked by measurement on this machine once the target is loaded…")
        for banner in wait_until_ready(service):
            yield {page.load_banner: banner, page.drafter_status: waiting, page.subtitle: header_md(service.target_name)}
        if service.startup_error is not None:
            gr.Warning(html.escape(f"Loading {target} failed: {service.startup_error}"))
            yield {page.load_banner: loading_html(service) or "", page.model_menu: service.target_name}
            return
        picked = service.picked
        kind = picked.drafter if picked is not None else "none"
        why = f" · picked by measurement: {picked.why}" if picked is not None else ""
        yield {page.load_banner: service.banner, page.subtitle: header_md(service.target_name),
               page.model_menu: gr.Dropdown(choices=model_choices(service.target_name), value=service.target_name),
               page.drafter: gr.Dropdown(choices=drafter_menu(service, self.kinds, True), value=kind),
               page.active_drafter: kind, page.drafter_status: status_html(f"drafter '{kind}' ready{why}{compile_note(service, kind)}")}

    # -- a page opened or closed ----------------------------------------------------------------
    def open_startup_traces(self, request: gr.Request = None):
        """``app.py --trace FILE``: each new page opens the files given."""
        session = self.session_of(request)
        view = None
        if not session.views.exchanges:
            for path in self.trace_files:
                view = session.open_trace(path)
        return self.updates(view) if view is not None else {self.page.inspector: gr.skip()}

    def drop_session(self, request: gr.Request = None):
        self.sessions.drop(getattr(request, "session_hash", None))
        self.picked_here.discard(getattr(request, "session_hash", None))
