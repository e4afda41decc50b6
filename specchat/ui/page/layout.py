"""The page's layout: the components of the chat page, where they sit and what they show at
start, and the texts around them (the explanation, the examples, the race's hint, the click hook).

:func:`build_page` makes the components inside a ``gr.Blocks`` and returns the ones events
use as a :class:`Page`; :data:`VIEW_OUTPUTS` says which of them each
:class:`~specchat.ui.session.view.View` field updates; :mod:`specchat.ui.page.wiring` wires them to the
handlers (:mod:`specchat.ui.page.handlers`). The page's JavaScript and CSS are files in ``static/``. The sliders and
checkboxes refuse out-of-range API input (:func:`bounded`, :func:`strict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from specchat.core.metrics import SpeculationMetrics
from specchat.drafters import kinds as drafter_kinds
from specchat.runtimes.paths import browser_secret
from specchat.service_api import ChatServiceProtocol, Pick
from specchat.ui.charts import figures as charts
from specchat.ui.html.render import TARGET_ONLY_LOOK, legend_html, stats_html, status_html, table_html
from specchat.ui.html.static_files import static_text
from specchat.ui.html.transcript import TEMPLATE as TRANSCRIPT_TEMPLATE
from specchat.ui.html.transcript import TRANSCRIPT_JS, wire
from specchat.ui.page.host import loading_html
from specchat.ui.session.chat import AUTO, PLOT_INTERVAL_S, ChatSession
from specchat.ui.session.saved import COLOUR_MODES, DEFAULT_MAX_NEW_TOKENS, SAVE_INTERVAL_S, SETTING_RANGES
from specchat.ui.session.view import View
from specchat.ui.session.views import CHART_SCOPES

EXPLAIN_MD = f"""
Each round the **drafter** proposes γ tokens; the **target** model scores all of them in **one**
forward pass and keeps the longest prefix it agrees with (token *x* is kept with probability
min(1, p(x)/q(x))). At the first rejection it draws a replacement from the residual
norm(max(0, p − q)) (**resampled**); if all γ were accepted it adds one **bonus** token of its
own. A round that drafted nothing commits one **target** token ({TARGET_ONLY_LOOK}): one step of
the target alone. So every round commits 1 … γ+1 tokens and the output has exactly the target's
distribution (at temperature 0: the target's greedy text, token for token, but where two tokens
were within rounding of each other: a verify pass over several tokens rounds a little differently
from single steps, so at such a near-tie two replies can part; **Race** shows where and by how much).

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
target-only decode step (its token {TARGET_ONLY_LOOK}, *target only*), timed during the reply under the same
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


RANGES: dict[str, tuple[float, float]] = {k: v for k, v in SETTING_RANGES.items() if v is not None}  # the sliders'

AUTO_CHOICE = "auto: picked by measurement"  # the drafter menu's entry for AUTO


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


# A click on a token (class tref-R-I) or a timeline round (class rref-R-K) anywhere on the page
# is written into the hidden #spec-pick box; its change event asks the session to select it. The
# time stamp makes a second click on the same token a change too. (Classes, not data- attributes:
# the Chatbot's sanitizer keeps only the former.) A queued message's cancel button writes its
# exchange id into #spec-unqueue, and the live panels on screen go into #spec-panels. The script
# is static/click.js; the page gets it in its <head> (``launch(head=CLICK_JS)``), after the light /
# dark switch (static/theme.js, first: it applies a kept choice before the page is drawn) and
# before the keyboard's keys (static/keys.js: Esc stops, ↑ edits the last message); last,
# static/frames.js stops the frame loops Gradio's status trackers leave running.
HEAD_SCRIPTS = ("theme.js", "click.js", "keys.js", "frames.js")
CLICK_JS = "".join("\n<script>\n" + static_text(name) + "</script>\n" for name in HEAD_SCRIPTS)

RACE_HINT = ("**Race**: runs the message in the box (or the last one sent) with the target alone, then with the "
             "drafter, back to back with the same settings and seed, and replays both at their measured speeds.")


@dataclass(frozen=True)
class Page:
    """The page's components that events read or update, by name (made by :func:`build_page`).

    ``transcript`` is the conversation (a feed, :mod:`specchat.ui.html.transcript`), ``colours`` its
    "colours" / "plain" switch. ``active_drafter`` is the drafter the service has ready (the dropdown shows the latest pick);
    ``pending`` carries a sent message from the emptied box to the reply, ``ticket`` its id in the
    session's queue (the reply takes that message, not another with the same text); ``panel_tick`` draws,
    while a reply streams, the panels its stream left aside (the stream itself sends only the
    transcript and the stats line); ``api_chat`` is the API's /chat; ``pick`` is the hidden
    box the click hook (:data:`CLICK_JS`) writes a token or round reference into, ``panels`` the
    one it writes the live panels on screen into ("charts,ledger,timeline", or ""), ``unqueue`` the
    one a queued message's cancel button writes its exchange id into; ``plots`` are the four
    charts (α over rounds, by position, speed, theory); ``saved`` is the conversation kept in the
    browser (restored after a reload); ``system_prompt`` the conversation's system message.
    """

    load_banner: gr.HTML
    transcript: gr.HTML
    colours: gr.Radio
    textbox: gr.Textbox
    send: gr.Button
    pending: gr.Textbox
    ticket: gr.Number
    stop: gr.Button
    stats: gr.HTML
    regenerate_btn: gr.Button
    edit_btn: gr.Button
    continue_btn: gr.Button
    export_btn: gr.Button
    export_file: gr.File
    active_drafter: gr.State
    drafter: gr.Dropdown
    drafter_status: gr.HTML
    adaptive: gr.Checkbox
    gamma: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    max_new_tokens: gr.Slider
    clear_btn: gr.Button
    show_rejected: gr.Checkbox
    pin: gr.Checkbox
    race_btn: gr.Button
    download: gr.DownloadButton
    upload: gr.UploadButton
    inspector: gr.HTML
    timeline: gr.HTML
    race: gr.HTML
    pick: gr.Textbox
    editing: gr.Textbox
    panels: gr.Textbox
    scope: gr.Radio
    plots: tuple[gr.Plot, gr.Plot, gr.Plot, gr.Plot]
    ledger: gr.HTML
    plot_worth: gr.Plot
    table: gr.HTML
    panel_tick: gr.Timer
    save_tick: gr.Timer
    api_chat: gr.Button
    system_prompt: gr.Textbox
    unqueue: gr.Textbox
    saved: gr.BrowserState
    settings_saved: gr.BrowserState
    subtitle: gr.Markdown
    model_menu: gr.Dropdown
    load_model_btn: gr.Button
    chats_saved: gr.BrowserState
    chat_list: gr.Radio
    new_chat_btn: gr.Button
    delete_chat_btn: gr.Button
    undo_btn: gr.Button
    rename_box: gr.Textbox

    def components(self, *names: str) -> list:
        """The components of ``names``, in order: a View field's (:data:`VIEW_OUTPUTS`), else the
        attribute's of that name (a tuple of components: each of them)."""
        out: list = []
        for name in names:
            part = getattr(self, VIEW_OUTPUTS.get(name, name))
            out.extend(part if isinstance(part, tuple) else (part,))
        return out

    def shown(self, view: View) -> dict:
        """``view`` as ``{component: value}``: each field it sets (not None), on its component(s)."""
        out: dict = {}
        for name, attr in VIEW_OUTPUTS.items():
            value = getattr(view, name)
            if value is None:
                continue
            if name in VIEW_VALUES:
                value = VIEW_VALUES[name](value)
            part = getattr(self, attr)
            if isinstance(part, tuple):
                out.update(zip(part, value))
            else:
                out[part] = value
        return out


def download_button(path: str) -> gr.DownloadButton:
    """The download button for a reply's trace file (``…reply7.jsonl``), named after its reply."""
    number = path.rsplit("reply", 1)[-1].removesuffix(".jsonl")
    return gr.DownloadButton(f"Download trace (reply #{number})", value=path)


# Where each View field (specchat.ui.session.view) goes on the page: the Page attribute it updates (a tuple
# of components takes one value each), in the order of the API's /chat outputs. Every event's
# outputs are named by these fields and derived from this map and the fields' streaming policy
# (specchat.ui.page.wiring). A new panel: its View field (with its policy), its component in
# build_page and Page, and its entry here (and in VIEW_VALUES if the page wants its value changed).
VIEW_OUTPUTS = {
    "textbox": "textbox", "transcript": "transcript", "stats": "stats", "table": "table", "figures": "plots",
    "inspector": "inspector", "timeline": "timeline", "race": "race", "trace_file": "download",
    "ledger": "ledger", "worth": "plot_worth",
}
VIEW_VALUES = {"transcript": wire, "trace_file": download_button}  # a View's value → its component's value


def drafter_menu(service: ChatServiceProtocol, kinds: list[str], auto: bool) -> list[tuple[str, str]]:
    """The drafter menu's (label, value) pairs: each kind with what it costs here when the
    calibration timed it (:func:`specchat.analysis.calibrate.menu_label`; the hybrid's is its model
    part's), and "auto" first when the app picks by measurement."""
    from specchat.analysis.calibrate import menu_label

    calibration = service.calibration
    part = service.hybrid_part() if "hybrid" in kinds else None

    def label(kind: str) -> str:
        if kind != "hybrid" or part is None:
            return menu_label(kind, calibration)
        return menu_label(part, calibration).replace(part, f"hybrid (lookup, then {part})", 1) if calibration else kind

    return ([(AUTO_CHOICE, AUTO)] if auto else []) + [(label(k), k) for k in kinds]


def header_md(target_name: str) -> str:
    """The page's header: its title and what the colours mean (in the legend's words)."""
    return (f"## specchat · speculative decoding, token by token\n"
            f"A cheap drafter proposes γ tokens, the target model "
            f"(`{target_name}`) checks them all in one pass: the colors show which tokens "
            f"it accepted, resampled, or added as a bonus ({TARGET_ONLY_LOOK}: a round with no draft). "
            f"The output is exactly the target's.")


def model_choices(current: str) -> list[str]:
    """The model menu: the models.yaml names (the shipped file and the user's), and ``current``
    when it is a path (a model directory or a .gguf file)."""
    from specchat.runtimes.registry import RegistryError, load_registry

    try:
        names = list(load_registry().models)
    except RegistryError:
        names = []
    return names if current in names else [current, *names]


def build_page(service: ChatServiceProtocol, *, kinds: list[str], drafter0: str, auto: bool, picked: Pick | None) -> Page:
    """Lay out the page's components (call inside ``gr.Blocks``) and return those events use.

    Args:
        service: anything with the ChatService interface (its target's name, its loading state).
        kinds: the drafters the dropdown offers; ``drafter0`` the one it shows at start.
        auto: the drafter is picked by measurement while the models load; ``picked`` is the
            service's pick so far (``(kind, why)``), or None.
    """
    subtitle = gr.Markdown(header_md(service.target_name), elem_classes="spec-subtitle")
    with gr.Accordion("How to read this page", open=False, elem_id="spec-explain"):
        gr.Markdown(EXPLAIN_MD)
    parts: dict[str, Any] = {"active_drafter": gr.State(drafter0), "subtitle": subtitle}
    with gr.Row(equal_height=False):
        # under ~840 px the side panel goes below the chat, which keeps the whole width (a tester at
        # 820 px: a 400-px chat column, code blocks scrolling sideways)
        with gr.Column(scale=3, min_width=560):
            parts |= _chat(service)
        with gr.Column(scale=1, min_width=250):
            parts |= _controls(service, kinds=kinds, drafter0=drafter0, auto=auto, picked=picked)
    gr.Examples(EXAMPLES, inputs=parts["textbox"], label="examples")
    parts |= _inside_the_rounds()
    parts |= _hidden()
    parts |= _charts_and_ledger(service)
    return Page(**parts)


def _chat(service: ChatServiceProtocol) -> dict[str, Any]:
    """The chat column: the legend, the loading banner, the transcript, the message box, Send and Stop, the stats line."""
    gr.HTML(legend_html())
    load_banner = gr.HTML(loading_html(service) or service.banner, elem_id="spec-loading")
    # the conversation: an empty container filled by its script, never re-sent whole
    # (specchat/ui/html/transcript.py); its value is a feed of the exchanges that changed
    transcript = gr.HTML(
        value={"seq": 0, "reset": True, "items": []}, html_template=TRANSCRIPT_TEMPLATE,
        js_on_load=TRANSCRIPT_JS, elem_id="spec-chat", padding=False,
    )
    with gr.Row(equal_height=True):
        textbox = gr.Textbox(
            show_label=False, placeholder="Message (Shift+Enter: new line)",
            lines=1, max_lines=8, scale=8, container=False, elem_id="spec-input",
        )
        send = gr.Button("Send", variant="primary", scale=1, min_width=70, elem_id="spec-send")
        pending = gr.Textbox(visible=False, label="message")
        # a component the browser holds (a gr.State lives on the server, read when the reply starts:
        # by then a later Send may have replaced it), so each reply gets its own message's id
        ticket = gr.Number(None, visible=False, precision=0, label="ticket")
        stop = gr.Button("Stop", variant="stop", scale=1, min_width=70, elem_id="spec-stop")
    stats = gr.HTML(stats_html(None), elem_id="spec-stats")
    # what the person can do to the last reply (specchat.ui.session.last_reply), and the export
    with gr.Row(equal_height=True, elem_id="spec-actions"):
        regenerate_btn = gr.Button("↻ Regenerate", size="sm", min_width=60, elem_id="spec-regenerate")
        edit_btn = gr.Button("✎ Edit", size="sm", min_width=60, elem_id="spec-edit")
        continue_btn = gr.Button("→ Continue", size="sm", min_width=60, elem_id="spec-continue")
        export_btn = gr.Button("⤓ Export", size="sm", min_width=60, elem_id="spec-export")
    export_file = gr.File(label="this chat, as Markdown and as JSON (with each reply's figures)", visible=False,
                          file_count="multiple", interactive=False, elem_id="spec-export-file")
    return dict(load_banner=load_banner, transcript=transcript, textbox=textbox, send=send, pending=pending, ticket=ticket, stop=stop,
                stats=stats, regenerate_btn=regenerate_btn, edit_btn=edit_btn, continue_btn=continue_btn, export_btn=export_btn,
                export_file=export_file)


def _controls(service: ChatServiceProtocol, *, kinds: list[str], drafter0: str, auto: bool, picked: Pick | None) -> dict[str, Any]:
    """The settings column: the chats, colours / plain, the drafter menu and its status, the reply's settings, Clear."""
    # several chats (specchat.ui.session.chats): the list is filled when the page loads
    with gr.Accordion("Chats", open=True, elem_id="spec-chats-box"):
        chat_list = gr.Radio(choices=[], value=None, show_label=False, container=False, elem_id="spec-chats")
        with gr.Row(equal_height=True):
            new_chat_btn = gr.Button("+ New chat", size="sm", min_width=60, elem_id="spec-new-chat")
            delete_chat_btn = gr.Button("Delete chat", size="sm", min_width=60, elem_id="spec-delete-chat")
            undo_btn = gr.Button("Undo", size="sm", min_width=60, visible=False, elem_id="spec-undo")
        rename_box = gr.Textbox(show_label=False, container=False, max_lines=1, elem_id="spec-rename",
                                placeholder="rename this chat (Enter)")
    # the model: a models.yaml name, or a path typed in (a Hugging Face-format directory, a .gguf file)
    with gr.Row(equal_height=True, elem_id="spec-model-row"):
        model_menu = gr.Dropdown(choices=model_choices(service.target_name), value=service.target_name, label="model",
                                 allow_custom_value=True, scale=4, elem_id="spec-model",
                                 info="a models.yaml name, or type the path of a model directory or a .gguf file")
        load_model_btn = gr.Button("Load", size="sm", scale=1, min_width=50, elem_id="spec-load-model")
    colours = gr.Radio(list(COLOUR_MODES), value="colours", label="reply text",
                       info="the token kinds as tints over the text, or the text alone", elem_id="spec-colours")
    # with --drafter auto, one more entry: the pick by measurement (what a message sent
    # before the pick is known runs with, once it is)
    drafter = gr.Dropdown(
        choices=drafter_menu(service, kinds, auto), value=drafter0,
        label="drafter", info=drafter_kinds.dropdown_hint(), elem_id="spec-drafter",
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
        *RANGES["gamma"], value=12, step=1,
        label="γ: draft tokens per round (the most, when adaptive)",
    ), integer=True)
    temperature = bounded(gr.Slider(*RANGES["temperature"], value=0.0, step=0.05, label="temperature (0 = greedy)"))
    top_p = bounded(gr.Slider(*RANGES["top_p"], value=1.0, step=0.05, label="top-p"))
    max_new_tokens = bounded(gr.Slider(*RANGES["max_new_tokens"], value=DEFAULT_MAX_NEW_TOKENS, step=16,
                                       label="max new tokens",
                                       info="a reply cut at this length can be continued (Continue)"), integer=True)
    system_prompt = gr.Textbox(
        value="", label="system prompt", placeholder="optional, e.g. 'Answer in one short paragraph.'", lines=2,
        max_lines=6, elem_id="spec-system",
        info="given to the model before the conversation, through its chat template; applies from the next reply",
    )
    clear_btn = gr.Button("Clear chat", variant="secondary", size="sm")
    return dict(model_menu=model_menu, load_model_btn=load_model_btn, chat_list=chat_list, new_chat_btn=new_chat_btn,
                delete_chat_btn=delete_chat_btn, undo_btn=undo_btn,
                rename_box=rename_box, colours=colours, drafter=drafter, drafter_status=drafter_status, adaptive=adaptive, gamma=gamma,
                temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, system_prompt=system_prompt,
                clear_btn=clear_btn)


def _inside_the_rounds() -> dict[str, Any]:
    """"Inside the rounds": its switches and buttons (rejected drafts, focus, race, trace files), the
    inspector, the timeline and the race."""
    gr.Markdown("### Inside the rounds", elem_classes="spec-section")
    with gr.Row(equal_height=True):
        show_rejected = strict(gr.Checkbox(
            value=False, label="show rejected drafts", info="inline in the replies, struck through", scale=2,
        ))
        pin = strict(gr.Checkbox(
            value=False, label="keep the clicked reply in focus", elem_id="spec-pin",
            info="every panel shows the reply you clicked; a new reply takes the focus unless this is on", scale=2,
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
    return dict(show_rejected=show_rejected, pin=pin, race_btn=race_btn, download=download, upload=upload,
                inspector=inspector, timeline=timeline, race=race)


def _hidden() -> dict[str, Any]:
    """What the page has but does not show: the boxes the click hook (:data:`CLICK_JS`) writes into,
    the conversation kept in the browser, the panel tick, the API's /chat."""
    pick = gr.Textbox(visible="hidden", elem_id="spec-pick", label="pick")
    unqueue = gr.Textbox(visible="hidden", elem_id="spec-unqueue", label="cancel a queued message")
    # the exchange whose message ↑ or Edit put into the box to edit (keys.js): replaced when sent
    editing = gr.Textbox(visible="hidden", elem_id="spec-editing", label="editing")
    # the conversation, kept in this browser's localStorage (encrypted) so that a reload restores it
    saved = gr.BrowserState(None, storage_key="specchat-conversation", secret=browser_secret())
    # the settings (drafter, γ, sampling, max new tokens, colours / plain), written on each change
    settings_saved = gr.BrowserState(None, storage_key="specchat-settings", secret=browser_secret())
    # the other chats of this browser, with their titles (specchat.ui.session.chats)
    chats_saved = gr.BrowserState(None, storage_key="specchat-chats", secret=browser_secret())
    # while a reply streams: draws the panels the reply's stream left in the session (ChatSession.defer)
    panel_tick = gr.Timer(PLOT_INTERVAL_S, active=False)
    # while a reply streams or a message waits: writes the chat into the browser (Handlers.save_now)
    save_tick = gr.Timer(SAVE_INTERVAL_S, active=False)
    api_chat = gr.Button(visible=False)  # the API's /chat: a reply with every output (the page streams two)
    panels = gr.Textbox(visible="hidden", elem_id="spec-panels", label="panels on screen")
    return dict(pick=pick, unqueue=unqueue, editing=editing, saved=saved, settings_saved=settings_saved, chats_saved=chats_saved,
                panel_tick=panel_tick, save_tick=save_tick,
                api_chat=api_chat, panels=panels)


def _charts_and_ledger(service: ChatServiceProtocol) -> dict[str, Any]:
    """The charts with their scope, the ledger with the α-against-c figure, the conversation table."""
    scope = gr.Radio(list(CHART_SCOPES), value=CHART_SCOPES[0], label="charts", container=False,
                     elem_id="spec-scope")
    figures0 = charts.all_figures(SpeculationMetrics())
    ledger0, worth0 = ChatSession(service).views.analysis()
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
    return dict(scope=scope, plots=(plot_alpha, plot_position, plot_speed, plot_theory), ledger=ledger,
                plot_worth=plot_worth, table=table)
