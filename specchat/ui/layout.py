"""The page: its layout (components) and the events wired to the per-session logic of
:class:`specchat.ui.session.ChatSession`. No behaviour of its own beyond turning a session's
:class:`~specchat.ui.session.View` into component updates; :func:`build_ui` takes any object with
the ChatService interface, so the tests drive the whole page with a scripted fake.
"""

from __future__ import annotations

import os
import threading
from typing import Any

# Offline and private: both must be set before gradio (and huggingface_hub) are imported.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gradio as gr  # noqa: E402

from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE  # noqa: E402
from specchat.core.metrics import SpeculationMetrics  # noqa: E402
from specchat.drafters import kinds as drafter_kinds  # noqa: E402
from specchat.ui import charts  # noqa: E402
from specchat.ui.host import compile_note, loading_banner, loading_html, stream_fn, wait_until_ready  # noqa: E402
from specchat.ui.render import legend_html, stats_html, status_html, table_html  # noqa: E402
from specchat.ui.session import CHART_SCOPES, ChatSession, ReplySettings, SessionStore, View  # noqa: E402

DRAFTER_CHOICES = drafter_kinds.KIND_NAMES  # the one table of drafter kinds (no torch import)
DEFAULT_DRAFTER_ORDER = drafter_kinds.DEFAULT_ORDER  # the drafter at start: the first the target offers


EXPLAIN_MD = """
Each round the **drafter** proposes γ tokens; the **target** model scores all of them in **one**
forward pass and keeps the longest prefix it agrees with (token *x* is kept with probability
min(1, p(x)/q(x))). At the first rejection it draws a replacement from the residual
norm(max(0, p − q)) (**resampled**); if all γ were accepted it adds one **bonus** token of its
own. So every round commits 1 … γ+1 tokens and the output has exactly the target's distribution
(at temperature 0: exactly the target's greedy text).

| symbol | meaning |
|---|---|
| α | acceptance rate: accepted drafts / judged drafts (each round judges its drafts up to the first rejection) |
| t₁ | one target-only decode step, **timed during the reply** (a round that drafted nothing) |
| c | cost ratio: one drafted token's time / t₁ |
| E[N] | expected tokens per round = (1 − α^(γ+1)) / (1 − α) |
| S(γ) | predicted speedup = E[N] · t₁ / (γ·d + v(γ+1)), with d the drafter's time per token and v(n) a verify pass over n tokens, all measured in the reply; Leviathan's (1 − α^(γ+1)) / ((1 − α)(γc + 1)) when v = t₁ |
| ĉ | arithmetic ratio: the drafter's matmul weights / the target's (0.32 for the 0.5B sibling of the 1.5B target, 1 for the int4 copy, 0 for n-gram) |
| β | at one position: Σₓ min(p(x), q(x)), the chance its draft is accepted |

**Speedups are measured like for like.** Now and then a round drafts nothing: a plain
target-only decode step (grey underline, *target only*), timed during the reply under the same
load as everything else. The speedup is committed tokens × t₁ / decode time, so it says how
much faster this reply was than the target alone *right now*, whatever else the machine does.

Some γ gives a speedup only if **α > c**. The best γ is the integer that maximises S(γ)
(the star on the theory chart).

**Adaptive γ** (on by default) makes that choice every round: it keeps running estimates of
the acceptance at each draft position and of the drafting and verification times, and drafts
the γ (up to the slider) with the highest predicted speedup, the same formula as the chart.
The γ it chose is the grey step line on the acceptance chart. It changes only how many tokens
are drafted, never which tokens are kept, so the answer's distribution is the same.

**What it costs.** The ledger under the charts counts both sides for a reply: the target runs one
pass per *round* instead of one per token, so it reads its weights E[N] times less often, while
the arithmetic *grows* by (1 − α)(γĉ + γ + 1) / (1 − α^(γ+1)): speculation trades spare compute
for memory bandwidth. Figures are tagged *counted*, *measured* or *predicted*. Click a
**resampled** token to see why the output is still exactly p: min(p, q) + (1 − β)·p′ = p.

**Honest limits.** The gain needs a *memory-bound* decode step: verifying γ+1 tokens must cost
about as much as generating one. Prefill and large batches are compute-bound and gain little.
A low α (a poor drafter, a high temperature, text unlike the prompt for n-gram lookup) makes
decoding *slower* than the target alone, and the speed chart shows it.

Source: Leviathan, Kalman, Matias, *Fast Inference from Transformers via Speculative
Decoding* (ICML 2023); Chen et al., *Accelerating LLM Decoding with Speculative Sampling* (2023).
"""  # noqa: E501 (Markdown table rows)

EXAMPLES = [
    "Write a Python function that checks whether a string is a palindrome, with tests.",
    "Rename the variable `x` to `count` in this code and add type hints:\n\n"
    "def tally(items):\n    x = 0\n    for item in items:\n        if item:\n            x += 1\n    return x",
    "Explain what a KV cache is in three sentences.",
]


def bounded(slider: gr.Slider, *, integer: bool = False) -> gr.Slider:
    """Make ``slider`` refuse out-of-range values (an API call can send any number) with an
    error that names the control and the whole allowed range; Gradio's own message gives one
    bound and no name. NaN is refused too (it passes Gradio's ``<`` and ``>`` checks).

    With ``integer`` a fractional value is refused too (``int()`` would silently truncate it).
    The check replaces the instance's ``preprocess``: a gr.Slider subclass would make Gradio
    write a ``.pyi`` stub next to this file on every start.
    """

    def preprocess(payload: Any) -> float:
        if isinstance(payload, bool) or not isinstance(payload, (int, float)) or not (
            slider.minimum <= payload <= slider.maximum
        ):
            raise gr.Error(
                f"{slider.label}: {payload!r} is out of range; allowed {slider.minimum:g} to {slider.maximum:g}",
                title="Invalid setting", print_exception=False,
            )
        if integer and payload != int(payload):
            raise gr.Error(
                f"{slider.label}: {payload!r} is not a whole number; allowed {slider.minimum:g} to {slider.maximum:g}",
                title="Invalid setting", print_exception=False,
            )
        return int(payload) if integer else gr.Slider.preprocess(slider, payload)

    slider.preprocess = preprocess
    return slider


def strict(checkbox: gr.Checkbox) -> gr.Checkbox:
    """Make ``checkbox`` refuse anything but true or false from an API call (Gradio passes
    ``"false"`` through, and ``bool("false")`` is True)."""

    def preprocess(payload: Any) -> bool:
        if not isinstance(payload, bool):
            raise gr.Error(
                f"{checkbox.label}: {payload!r} is not true or false", title="Invalid setting", print_exception=False
            )
        return payload

    checkbox.preprocess = preprocess
    return checkbox


def _pick_drafter(kinds: list[str], preferred: str | None) -> str:
    if preferred in kinds:
        return preferred
    for kind in DEFAULT_DRAFTER_ORDER:
        if kind in kinds:
            return kind
    return kinds[0] if kinds else "none"


def _toast(level: str, text: str) -> None:
    (gr.Warning if level == "warning" else gr.Info)(text)


# A click on a token (class tref-R-I) or a timeline round (class rref-R-K) anywhere on the page
# is written into the hidden #spec-pick box; its change event asks the session to select it. The
# time stamp makes a second click on the same token a change too. (Classes, not data- attributes:
# the Chatbot's sanitizer keeps only the former.)
CLICK_JS = """
<script>
document.addEventListener('click', (ev) => {
  const el = ev.target.closest('[class*="tref-"], [class*="rref-"]');
  if (!el) return;
  const m = el.className.match(/\\b(tref|rref)-(\\d+)-(\\d+)\\b/);
  if (!m) return;
  const ref = (m[1] === 'rref' ? 'round:' : '') + m[2] + ':' + m[3];
  const box = document.querySelector('#spec-pick textarea, #spec-pick input');
  if (!box) return;
  box.value = ref + '|' + Date.now();
  box.dispatchEvent(new Event('input', {bubbles: true}));
});
</script>
"""

RACE_HINT = ("**Race**: runs the message in the box (or the last one sent) with the target alone, then with the "
             "drafter, back to back with the same settings and seed, and replays both at their measured speeds.")


def build_ui(service: Any, *, default_drafter: str | None = None, trace_files: tuple[str, ...] = ()) -> gr.Blocks:
    """The whole app around ``service`` (anything with the ChatService interface): the layout,
    and events wired to the per-session logic of :class:`specchat.ui.session.ChatSession`.

    Loads nothing itself: the service is loaded already, or loading in the background after
    ``service.start()`` (the page then shows its progress). Pass ``CSS`` to ``launch(css=…)``.
    The sessions are in ``demo.sessions`` (a :class:`~specchat.ui.session.SessionStore`).
    """
    kinds = list(service.drafter_kinds())
    # "auto": the service picks the drafter by measurement while it loads (ChatService.pick_drafter);
    # the menu shows the fixed order's first until then, and the pick once the models are ready
    auto = default_drafter == "auto"
    picked = getattr(service, "picked", None)
    drafter0 = _pick_drafter(kinds, picked[0] if auto and picked else default_drafter)
    sessions = SessionStore(lambda: ChatSession(service, stream=stream_fn(service)))

    def session_of(request: gr.Request | None) -> ChatSession:
        return sessions.get(getattr(request, "session_hash", None))

    with gr.Blocks(title="specchat · speculative decoding") as demo:
        gr.Markdown(
            f"## specchat · speculative decoding, token by token\n"
            f"A cheap drafter proposes γ tokens, the target model "
            f"(`{service.target_name}`) checks them all in one pass: the colors show which tokens "
            f"it accepted, resampled, or added as a bonus. The output is exactly the target's.",
            elem_classes="spec-subtitle",
        )
        with gr.Accordion("How to read this page", open=False, elem_id="spec-explain"):
            gr.Markdown(EXPLAIN_MD)
        active_drafter = gr.State(drafter0)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=320):
                gr.HTML(legend_html())
                load_banner = gr.HTML(loading_html(service) or getattr(service, "banner", ""), elem_id="spec-loading")
                chatbot = gr.Chatbot(
                    label="chat", show_label=False, height=460,
                    render_markdown=False,  # show model text verbatim; see specchat/ui/render.py
                    latex_delimiters=[], sanitize_html=True, feedback_options=None, buttons=[],
                    placeholder="Ask for some code. Tokens appear colored by how they were produced.",
                    elem_id="spec-chat",
                )
                with gr.Row(equal_height=True):
                    textbox = gr.Textbox(
                        show_label=False, placeholder="Message (Enter sends, Shift+Enter = new line)",
                        lines=1, max_lines=8, scale=8, container=False, elem_id="spec-input",
                    )
                    send = gr.Button("Send", variant="primary", scale=1, min_width=70)
                    pending = gr.Textbox(visible=False, label="message")
                    stop = gr.Button("Stop", variant="stop", scale=1, min_width=70)
                stats = gr.HTML(stats_html(None), elem_id="spec-stats")
            with gr.Column(scale=1, min_width=250):
                drafter = gr.Dropdown(
                    choices=kinds, value=drafter0, label="drafter", info=drafter_kinds.dropdown_hint(),
                )
                drafter_status = gr.HTML(
                    status_html("drafter: picked by measurement on this machine once the target is loaded…"
                                if auto and not picked and loading_html(service)
                                else f"drafter '{drafter0}' " + ("loading…" if loading_html(service) else "ready")),
                    elem_id="spec-drafter-status",
                )
                adaptive = strict(gr.Checkbox(
                    value=True, label="adaptive γ",
                    info="pick γ each round (up to the slider) from the measured acceptance and costs",
                ))
                gamma = bounded(gr.Slider(
                    1, MAX_NUM_SPECULATIVE_TOKENS, value=12, step=1,
                    label="γ: draft tokens per round (the most, when adaptive)",
                ), integer=True)
                temperature = bounded(gr.Slider(0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="temperature (0 = greedy)"))
                top_p = bounded(gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p"))
                max_new_tokens = bounded(gr.Slider(16, 2048, value=256, step=16, label="max new tokens"), integer=True)
                clear_btn = gr.Button("Clear chat", variant="secondary", size="sm")
        gr.Examples(EXAMPLES, inputs=textbox, label="examples")
        gr.Markdown("### Inside the rounds", elem_classes="spec-section")
        with gr.Row(equal_height=True):
            show_rejected = strict(gr.Checkbox(
                value=False, label="show rejected drafts", info="inline in the replies, struck through", scale=2,
            ))
            race_btn = gr.Button("Race: target only vs drafter", scale=2, elem_id="spec-race-btn")
            download = gr.DownloadButton("Download trace", value=None, scale=2, elem_id="spec-download")
            upload = gr.UploadButton("Open a trace…", file_types=[".jsonl", ".json"], file_count="single", scale=2,
                                     elem_id="spec-upload")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=320):
                inspector = gr.HTML(elem_id="spec-inspector", value='<div class="spec-inspector spec-muted">'
                                    "Click any token of a reply to look inside its round.</div>")
            with gr.Column(scale=2, min_width=300):
                timeline = gr.HTML(elem_id="spec-timeline", value='<div class="spec-timeline spec-muted">'
                                   "The timeline fills in as a reply streams: one bar per round.</div>")
        gr.Markdown(RACE_HINT, elem_classes="spec-race-hint")
        race = gr.HTML(elem_id="spec-race")
        pick = gr.Textbox(visible="hidden", elem_id="spec-pick", label="pick")
        scope = gr.Radio(list(CHART_SCOPES), value=CHART_SCOPES[0], label="charts", container=False,
                         elem_id="spec-scope")
        figures0 = charts.all_figures(SpeculationMetrics())
        ledger0, worth0 = ChatSession(service).analysis()
        with gr.Row():
            plot_alpha = gr.Plot(figures0[0], show_label=False, elem_id="plot-alpha", elem_classes="spec-plot", min_width=320)
            plot_position = gr.Plot(figures0[1], show_label=False, elem_id="plot-position", elem_classes="spec-plot", min_width=320)
        with gr.Row():
            plot_speed = gr.Plot(figures0[2], show_label=False, elem_id="plot-speed", elem_classes="spec-plot", min_width=320)
            plot_theory = gr.Plot(figures0[3], show_label=False, elem_id="plot-theory", elem_classes="spec-plot", min_width=320)
        gr.Markdown("### What speculation spent and saved", elem_classes="spec-section")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=320):
                ledger = gr.HTML(ledger0, elem_id="spec-ledger")
            with gr.Column(scale=2, min_width=300):
                plot_worth = gr.Plot(worth0, show_label=False, elem_id="plot-worth", elem_classes="spec-plot")
        gr.Markdown("**The conversation, one row per reply**", elem_classes="spec-table-title")
        table = gr.HTML(table_html([]), elem_id="spec-table")
        plots = (plot_alpha, plot_position, plot_speed, plot_theory)

        def updates(view: View) -> dict:
            """A session's View as ``{component: value}`` (parts it leaves alone are left out)."""
            for level, text in view.toasts:
                _toast(level, text)
            out: dict = {}
            for component, value in ((chatbot, view.chat), (stats, view.stats), (table, view.table),
                                     (textbox, view.textbox), (inspector, view.inspector),
                                     (timeline, view.timeline), (race, view.race)):
                if value is not None:
                    out[component] = value
            if view.trace_file is not None:
                number = view.trace_file.rsplit("reply", 1)[-1].removesuffix(".jsonl")
                out[download] = gr.DownloadButton(f"Download trace (reply #{number})", value=view.trace_file)
            if view.figures is not None:
                out.update(zip(plots, view.figures))
            if view.ledger is not None:
                out[ledger] = view.ledger
            if view.worth is not None:
                out[plot_worth] = view.worth
            return out or {stats: gr.skip()}  # Gradio reads an empty dict as one value

        def take_message(message, request: gr.Request = None):
            """Sending, step 1 (instant: no concurrency limit): empty the box at once, so the user
            can type the next message while this one waits or streams; the message goes on in
            ``pending``. If a reply is streaming, say that this message waits for it."""
            if session_of(request).note_sent(message) and message and message.strip():
                gr.Info("Your message is queued: it is sent when the current reply ends (Stop cancels it).")
            return "", message

        def respond(message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True,
                    request: gr.Request = None):
            """Sending, step 2: stream one reply (see ChatSession.respond)."""
            settings = ReplySettings(drafter, gamma, adaptive, temperature, top_p, max_new_tokens)
            try:
                for view in session_of(request).respond(message, settings):
                    yield updates(view)
            except ValueError as exc:  # an out-of-range setting: only an API call can send one
                raise gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False) from exc

        def stop_generation(request: gr.Request = None):
            """Stop: the reply ends after its current round; messages waiting behind it are cancelled."""
            said = session_of(request).stop()
            if said:
                gr.Info(said)

        def clear(request: gr.Request = None):
            return updates(session_of(request).clear())

        def set_scope(choice, request: gr.Request = None):
            return updates(session_of(request).set_chart_scope(choice))

        def prepare_drafter(kind, active):
            """Load the chosen drafter (the target stays loaded) in a thread, showing its progress;
            on failure fall back to the active one. (No gr.Progress(track_tqdm=True): it patches
            tqdm globally and breaks bars that were created before, e.g. by the start-up thread.)"""
            errors: list[BaseException] = []

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
                    yield {drafter_status: loading_banner(f"Preparing drafter '{kind}'")}
            if errors:
                gr.Warning(f"Could not prepare drafter '{kind}': {errors[0]}")
                yield {drafter_status: status_html(f"drafter '{kind}' failed: {errors[0]}", error=True),
                       drafter: active, active_drafter: active}
                return
            # the dropdown is left alone: it shows the user's latest pick, which a queued later
            # pick ("always_last") reads when it runs; writing `kind` back would undo that pick
            yield {drafter_status: status_html(f"drafter '{kind}' ready{compile_note(service)}"), active_drafter: kind}

        def show_loading():
            """On page load: mirror the background loading progress until the models are ready;
            if the start-up drafter failed to load, switch this page to target-only and say why."""
            for banner in wait_until_ready(service):
                yield {load_banner: banner}
            if getattr(service, "startup_error", None) is not None:
                return
            picked = getattr(service, "picked", None) if auto else None
            first = picked[0] if picked and picked[0] in kinds else drafter0
            error = getattr(service, "drafter_errors", {}).get(first)
            if error is not None:
                text = f"drafter '{first}' could not be loaded ({error}): answering with the target only"
                gr.Warning(text)
                yield {load_banner: "", drafter_status: status_html(text, error=True),
                       drafter: "none", active_drafter: "none"}
                return
            why = f" · picked by measurement: {picked[1]}" if picked else ""
            why += compile_note(service)
            yield {load_banner: getattr(service, "banner", ""), drafter_status: status_html(f"drafter '{first}' ready{why}"),
                   **({drafter: first, active_drafter: first} if picked else {})}

        def select(ref, request: gr.Request = None):
            try:
                return updates(session_of(request).select((ref or "").split("|")[0]))
            except ValueError:
                return {inspector: gr.skip()}

        def set_show_rejected(show, request: gr.Request = None):
            return updates(session_of(request).set_show_rejected(show))

        def open_trace(file, request: gr.Request = None):
            from specchat.analysis.trace import TraceError

            path = getattr(file, "name", file)
            try:
                return updates(session_of(request).open_trace(path))
            except (TraceError, OSError, UnicodeDecodeError) as exc:
                raise gr.Error(f"Could not open the trace: {exc}", title="Not a trace", print_exception=False) from exc

        def run_race(message, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True,
                     request: gr.Request = None):
            session = session_of(request)
            settings = ReplySettings(drafter, gamma, adaptive, temperature, top_p, max_new_tokens)
            try:
                for view in session.run_race(session.race_message(message), settings):
                    yield {k: v for k, v in updates(view).items() if k is race} or {race: gr.skip()}
            except ValueError as exc:
                raise gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False) from exc

        def replay_race(request: gr.Request = None):
            yield {race: gr.skip()}  # nothing to replay (a refused or stopped race) leaves the panel as it is
            for view in session_of(request).replay_race():
                yield {race: view.race}

        def open_startup_traces(request: gr.Request = None):
            """``app.py --trace FILE``: each new page opens the files given."""
            session = session_of(request)
            view = None
            if not session.exchanges:
                for path in trace_files:
                    view = session.open_trace(path)
            return updates(view) if view is not None else {inspector: gr.skip()}

        def drop_session(request: gr.Request = None):
            sessions.drop(getattr(request, "session_hash", None))

        inside = [inspector, timeline, race, download, ledger, plot_worth]
        everything = [textbox, chatbot, stats, table, *plots, *inside]
        common = dict(
            fn=respond, inputs=[pending, drafter, gamma, temperature, top_p, max_new_tokens, adaptive],
            outputs=everything, show_progress="hidden", concurrency_limit=1, concurrency_id="model",
            trigger_mode="multiple",  # a message sent while another streams queues; "once" would drop it
        )
        take = dict(
            fn=take_message, inputs=[textbox], outputs=[textbox, pending], concurrency_limit=None,
            show_progress="hidden", api_visibility="private",
        )
        send.click(**take).then(api_name="chat", **common)
        textbox.submit(**take).then(api_visibility="private", **common)
        stop.click(stop_generation, None, None, concurrency_limit=None, api_visibility="private")
        # .select fires once per user choice (Gradio 6.31's Dropdown fires .input twice) and
        # not when prepare_drafter puts the previous value back after a failure
        drafter.select(
            prepare_drafter, inputs=[drafter, active_drafter], outputs=[drafter_status, drafter, active_drafter],
            concurrency_limit=1, concurrency_id="model", show_progress="hidden",
            trigger_mode="always_last",  # picks made while one waits: the last one wins ("once" dropped them)
            api_name="prepare_drafter",
        )
        scope.input(set_scope, inputs=[scope], outputs=list(plots), concurrency_limit=None,
                    show_progress="hidden", api_name="charts")
        demo.load(
            show_loading, None, [load_banner, drafter_status, drafter, active_drafter], show_progress="hidden",
            api_visibility="private",
            concurrency_limit=None,  # every open tab polls; no model work happens here
        )
        cleared = [chatbot, stats, table, *plots, inspector, timeline, ledger, plot_worth]
        clear_btn.click(clear, None, cleared, concurrency_limit=None, api_visibility="private")
        # the Chatbot's own trash button empties the display: empty the conversation with it
        chatbot.clear(clear, None, cleared, concurrency_limit=None, api_visibility="private")
        pick.change(select, inputs=[pick], outputs=[inspector, timeline, download, ledger, plot_worth], concurrency_limit=None,
                    show_progress="hidden", api_visibility="private")
        show_rejected.change(set_show_rejected, inputs=[show_rejected], outputs=[chatbot], concurrency_limit=None,
                             show_progress="hidden", api_visibility="private")
        upload.upload(open_trace, inputs=[upload], outputs=everything, concurrency_limit=None,
                      show_progress="hidden", api_name="open_trace")
        race_btn.click(
            run_race, inputs=[textbox, drafter, gamma, temperature, top_p, max_new_tokens, adaptive],
            outputs=[race], show_progress="hidden", concurrency_limit=1, concurrency_id="model", api_name="race",
        ).then(replay_race, None, [race], show_progress="hidden", concurrency_limit=None, api_visibility="private")
        if trace_files:
            demo.load(open_startup_traces, None, everything, show_progress="hidden", api_visibility="private",
                      concurrency_limit=None)
        demo.unload(drop_session)
    demo.sessions = sessions
    return demo
