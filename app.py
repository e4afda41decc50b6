"""specchat: a local Gradio chat that shows speculative decoding at work.

    python app.py [--target NAME_OR_PATH] [--drafter {none,ngram,int4,sibling,sibling-int4}]
                  [--host 127.0.0.1] [--port 7860] [--dtype auto|float32|bfloat16]

Layout and event wiring only: the models live in one module-level ChatService (loaded once,
behind a lock, never in gr.State); token events become colored HTML (specchat.ui_render) and
running statistics become plotly figures (specchat.charts). :func:`build_ui` takes any object
with the ChatService interface, so the tests drive the whole UI with a scripted fake.
"""

from __future__ import annotations

import argparse
import html
import ipaddress
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

# Offline and private: both must be set before gradio (and huggingface_hub) are imported.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gradio as gr  # noqa: E402

from specchat import charts  # noqa: E402
from specchat.config import MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE, GenerationConfig  # noqa: E402
from specchat.events import DoneEvent, DrafterFailedEvent, RoundEvent, TokenEvent  # noqa: E402
from specchat.metrics import SpeculationMetrics  # noqa: E402
from specchat.ui_render import CSS, ReplyRenderer, legend_html, render_user, stats_html  # noqa: E402

if TYPE_CHECKING:
    from specchat.service import ChatService

# Mirrors specchat.registry.DRAFTER_KINDS (a test checks it) so that `--help` needs no torch.
DRAFTER_CHOICES = ("none", "ngram", "int4", "sibling", "sibling-int4")
# Drafter selected at start when --drafter is not given: the first one the target offers.
# sibling-int4 first: the fastest in `python -m specchat bench` on the default pair (3.1x
# target-only on a 2-core CPU) and its quantization takes about 10 s; bitsandbytes re-quantizes
# the int4 copy of the target on every start (about a minute), so int4 loads only when picked.
DEFAULT_DRAFTER_ORDER = ("sibling-int4", "sibling", "int4", "ngram", "none")
DTYPE_CHOICES = ("auto", "float32", "bfloat16")

TEXT_INTERVAL_S = 0.25  # chat + stats refresh while streaming (4 Hz)
PLOT_INTERVAL_S = 1.0  # figure refresh while streaming (1 Hz); the final update is always full

# ---- optional ZeroGPU (Hugging Face Spaces) -----------------------------------------------
ON_ZEROGPU = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
try:
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU
except ImportError:  # not on Spaces: a pass-through decorator, usable as @gpu or @gpu(duration=…)

    def gpu(fn=None, **_kwargs):
        return (lambda f: f) if fn is None else fn


# ---- the one loaded service ---------------------------------------------------------------
_SERVICE: ChatService | None = None
_SERVICE_LOCK = threading.Lock()


def get_service(*, target: str | None = None, dtype: str = "auto") -> ChatService:
    """The module-level ChatService, created on first use (thread-safe). Loads nothing:
    ``service.start(drafter)`` loads the models in the background."""
    global _SERVICE
    with _SERVICE_LOCK:
        if _SERVICE is None:
            from specchat.service import ChatService

            _SERVICE = ChatService(target=target, dtype=dtype)
        return _SERVICE


def loading_html(service: Any) -> str | None:
    """A progress banner while the service loads in the background; None once it is ready."""
    error = getattr(service, "startup_error", None)
    if error is not None:
        return _status_html(f"Loading the models failed: {error}", error=True)
    return loading_banner("Loading models") if getattr(service, "loading", False) else None


def loading_banner(default_stage: str) -> str:
    """HTML progress banner from the progress board (the same bars the terminal draws)."""
    from specchat.progress import BOARD

    snap = BOARD.snapshot()
    pct = "" if snap.fraction is None else f"{snap.fraction * 100:.0f}%"
    width = 0 if snap.fraction is None else snap.fraction * 100
    bar = html.escape(snap.bar or "")
    return (
        f'<div class="spec-loading"><div>{html.escape(snap.stage or default_stage)}…</div>'
        f'<div class="spec-loading-bar"><div style="width:{width:.0f}%"></div></div>'
        f'<div class="spec-loading-detail">{bar} {pct}</div></div>'
    )


def wait_until_ready(service: Any, poll_s: float = 0.5, cancel: threading.Event | None = None) -> Iterator[str]:
    """Yield the loading banner every ``poll_s`` seconds until the service is ready (or cancel)."""
    while (banner := loading_html(service)) is not None:
        yield banner
        if service.startup_error is not None or (cancel is not None and cancel.is_set()):
            return
        time.sleep(poll_s)


# ---- Stop: cooperative, per browser session -----------------------------------------------
# The Stop button sets the running generation's cancel event; the engine stops between rounds
# and the handler ends normally, with a final update that says "stopped". (Gradio's
# `cancels=` would close the generator from another thread while it is running, which fails
# and shows an error in place of the chat.)
class _Run:
    """One running generation: its cancel event, and whether its updates are still wanted."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.discard = False  # set by Clear: the chat was emptied, send no more updates


_ACTIVE: dict[str, _Run] = {}
_ACTIVE_LOCK = threading.Lock()
# messages sent but not started yet (waiting in the queue), and Stop / Clear pressed meanwhile
_QUEUED: dict[str, int] = {}
_STOP_QUEUED: dict[str, bool] = {}  # session -> discard (Clear) or not (Stop)


def _session(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)


def _register(request: gr.Request | None, run: _Run) -> None:
    """Make ``run`` this session's running generation; a Stop or Clear pressed while its
    message waited in the queue applies to it at once."""
    if (key := _session(request)) is not None:
        with _ACTIVE_LOCK:
            _ACTIVE[key] = run
            if _QUEUED.get(key, 0) > 0:
                _QUEUED[key] -= 1
            if key in _STOP_QUEUED:
                run.discard = _STOP_QUEUED.pop(key)
                run.cancel.set()


def _note_queued(request: gr.Request | None) -> bool:
    """Count a message of this session as waiting; True if it waits behind one running or queued."""
    if (key := _session(request)) is None:
        return False
    with _ACTIVE_LOCK:
        busy = key in _ACTIVE or _QUEUED.get(key, 0) > 0
        _QUEUED[key] = _QUEUED.get(key, 0) + 1
    return busy


def _unregister(request: gr.Request | None, run: _Run) -> None:
    if (key := _session(request)) is not None:
        with _ACTIVE_LOCK:
            if _ACTIVE.get(key) is run:
                del _ACTIVE[key]


def stop_generation(request: gr.Request | None = None, *, discard: bool = False) -> None:
    """Ask this browser session's running generation to stop after its current round; if
    none runs but a message waits in the queue, that one stops before any model work."""
    if (key := _session(request)) is not None:
        with _ACTIVE_LOCK:
            run = _ACTIVE.get(key)
            if run is None and _QUEUED.get(key, 0) > 0:
                _STOP_QUEUED[key] = _STOP_QUEUED.get(key, False) or discard
        if run is not None:
            run.discard = run.discard or discard
            run.cancel.set()


@gpu(duration=120)
def _stream_on_zerogpu(history, message, drafter, config):
    """ZeroGPU runs this in a forked worker: it reads the module-level service, yields plain events."""
    yield from _SERVICE.stream_chat(history, message, drafter=drafter, config=config)


def _stream(service, history, message, drafter, config, cancel) -> Iterator[Any]:
    if ON_ZEROGPU and service is _SERVICE:
        return _stream_on_zerogpu(history, message, drafter, config)
    return service.stream_chat(history, message, drafter=drafter, config=config, cancel=cancel)


# ---- UI -------------------------------------------------------------------------------------
EXPLAIN_MD = """
**How to read this.** Each round the drafter proposes γ tokens; the target model scores all of
them in **one** forward pass and keeps the longest prefix it agrees with (token *x* is kept with
probability min(1, p(x)/q(x))). At the first rejection it draws a replacement from the residual
norm(max(0, p − q)) (**resampled**); if all γ were accepted it adds one **bonus** token of its
own. So every round commits 1 … γ+1 tokens and the output has exactly the target's distribution
(at temperature 0: exactly the target's greedy text).

| symbol | meaning |
|---|---|
| α | acceptance rate: accepted drafts / judged drafts (each round judges its drafts up to the first rejection) |
| c | cost ratio: one drafter step / one target step (wall time) |
| E[N] | expected tokens per round = (1 − α^(γ+1)) / (1 − α) |
| S(γ) | predicted speedup = (1 − α^(γ+1)) / ((1 − α)(γc + 1)) |

Some γ gives a speedup only if **α > c**. The best γ is the integer that maximises S(γ)
(the star on the theory chart).

**Adaptive γ** (on by default) makes that choice every round: it keeps running estimates of
the acceptance at each draft position and of the drafting and verification times, and drafts
the γ (up to the slider) with the highest predicted speedup. The γ it chose is the grey step
line on the acceptance chart. It changes only how many tokens are drafted, never which
tokens are kept, so the answer's distribution is the same.

**Honest limits.** The gain needs a *memory-bound* decode step: verifying γ+1 tokens must cost
about as much as generating one. Prefill and large batches are compute-bound and gain little.
A low α (a poor drafter, a high temperature, text unlike the prompt for n-gram lookup) makes
decoding *slower* than the target alone — the speed chart shows it honestly.

Source: Leviathan, Kalman, Matias, *Fast Inference from Transformers via Speculative
Decoding* (ICML 2023); Chen et al., *Accelerating LLM Decoding with Speculative Sampling* (2023).
"""

EXAMPLES = [
    "Write a Python function that checks whether a string is a palindrome, with tests.",
    "Rename the variable `x` to `count` in this code and add type hints:\n\n"
    "def tally(items):\n    x = 0\n    for item in items:\n        if item:\n            x += 1\n    return x",
    "Explain what a KV cache is in three sentences.",
]


def _empty_figures() -> tuple:
    return charts.all_figures(SpeculationMetrics())


def _status_html(text: str, *, error: bool = False) -> str:
    cls = "spec-error" if error else "spec-status"
    return f'<div class="{cls}">{html.escape(text)}</div>'


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


def build_ui(service: Any, *, default_drafter: str | None = None) -> gr.Blocks:
    """The whole app around ``service`` (anything with the ChatService interface).

    Loads nothing itself: the service is loaded already, or loading in the background after
    ``service.start()`` (the page then shows its progress). Pass ``CSS`` to ``launch(css=…)``.
    """
    kinds = list(service.drafter_kinds())
    drafter0 = _pick_drafter(kinds, default_drafter)
    figures0 = _empty_figures()

    def take_message(message, request: gr.Request = None):
        """Sending, step 1 (instant: no concurrency limit): empty the box at once, so the user
        can type the next message while this one waits or streams; the message goes on in
        ``pending``. If a reply is streaming, say that this message waits for it."""
        if _note_queued(request) and message and message.strip():
            gr.Info("Your message is queued: it is sent when the current reply ends (Stop cancels it).")
        return "", message

    def respond(
        message, history, chat, drafter, gamma, temperature, top_p, max_new_tokens, adaptive=True,
        request: gr.Request = None,
    ):
        """Sending, step 2: stream one reply. ``chat`` is the displayed conversation, kept on
        the server (a gr.State read when this runs, not when the message was sent: a message
        queued behind a streaming reply must not redraw that reply as it was at send time).
        Yields (textbox, chatbot, chat state, history, stats, 4 figures), throttled."""
        run = _Run()
        _register(request, run)
        skip = gr.skip()
        try:
            settings = (drafter, gamma, temperature, top_p, max_new_tokens, adaptive)
            for update in _respond(message, history, chat, *settings, run.cancel):
                if run.discard:  # Clear was pressed: end on an empty chat (Gradio re-sends the last update)
                    yield (skip, *cleared_values())
                    return
                textbox_value, shown, *rest = update
                yield (textbox_value, shown, shown, *rest)
        finally:
            run.cancel.set()  # also on GeneratorExit (tab closed): the engine stops between rounds
            _unregister(request, run)

    def _respond(message, history, chat, drafter, gamma, temperature, top_p, max_new_tokens, adaptive, cancel):
        skip = gr.skip()
        from specchat.chat import is_blank  # here: `app.py --help` must not import transformers

        message = message or ""
        if is_blank(message):  # empty, whitespace or only invisible characters
            gr.Warning("Type a message first.")
            yield (message or skip,) + (skip,) * 7  # whitespace goes back to the box as typed
            return
        history = list(history or [])
        chat = list(chat or [])
        try:
            config = GenerationConfig(
                num_speculative_tokens=int(gamma),
                adaptive_gamma=bool(adaptive),
                temperature=float(temperature),
                top_p=float(top_p),
                max_new_tokens=int(max_new_tokens),
            )
        except ValueError as exc:  # only an API call can get here (the sliders are bounded)
            raise gr.Error(f"Invalid setting: {exc}", title="Invalid setting", print_exception=False) from exc

        if loading_html(service) is not None:  # still loading in the background: wait, visibly
            waiting = {"role": "assistant", "content": _status_html("waiting for the models to finish loading…")}
            pending = chat + [{"role": "user", "content": render_user(message)}, waiting]
            for _ in wait_until_ready(service, cancel=cancel):
                yield (skip, pending, skip, skip, *(skip,) * 4)
            if service.startup_error is not None or cancel.is_set():
                if service.startup_error is not None:
                    gr.Warning(f"The models could not be loaded: {service.startup_error}")
                yield (message, chat, skip, skip, *(skip,) * 4)  # the message goes back to the box
                return

        baseline = service.baseline_tokens_per_s
        metrics = SpeculationMetrics(baseline_tokens_per_s=baseline)
        reply = ReplyRenderer()
        chat.append({"role": "user", "content": render_user(message)})
        chat.append({"role": "assistant", "content": reply.html()})
        user_turn = {"role": "user", "content": message}

        def chat_now() -> list[dict]:
            chat[-1] = {"role": "assistant", "content": reply.html()}
            return chat

        def history_now() -> list[dict]:
            return history + [user_turn, {"role": "assistant", "content": reply.text}]

        def stats_now(running: bool) -> str:
            return stats_html(metrics, baseline_tokens_per_s=baseline, running=running)

        # first update: the user's message and a placeholder reply (take_message emptied the box)
        yield (skip, chat_now(), history_now(), stats_now(True), *figures0)

        stream = None
        last_text = last_plot = time.monotonic()
        try:
            stream = _stream(service, history, message, drafter, config, cancel)
            for item in stream:
                if isinstance(item, TokenEvent):
                    metrics.update(item)
                    reply.add_token(item)
                elif isinstance(item, RoundEvent):
                    metrics.update(item)
                elif isinstance(item, DoneEvent):
                    metrics.update(item)
                    reply.finish(item)
                else:  # a Notice or DrafterFailedEvent: shown in the reply bubble and as a toast
                    text = str(getattr(item, "text", item))
                    reply.add_notice(text)
                    if isinstance(item, DrafterFailedEvent) or getattr(item, "warning", False):
                        gr.Warning(text)  # the drafter is gone for this reply: the user must see why
                    else:
                        gr.Info(text)
                now = time.monotonic()
                if now - last_text >= TEXT_INTERVAL_S:
                    figures = (skip,) * 4
                    if now - last_plot >= PLOT_INTERVAL_S:
                        figures = charts.all_figures(metrics)
                        last_plot = now
                    last_text = now
                    yield (skip, chat_now(), history_now(), stats_now(True), *figures)
        except Exception as exc:  # SpecchatError, ValueError, a failing model: show it, keep the text
            reply.set_error(str(exc) or type(exc).__name__)
            gr.Warning(f"Generation failed: {exc}")
            # the failed exchange stays visible but not in the history; the message goes back
            yield (message, chat_now(), history, stats_now(False), *charts.all_figures(metrics))
            return
        finally:
            # on normal exit, error and GeneratorExit; respond() sets the cancel event after it
            if hasattr(stream, "close"):
                stream.close()
        # the final update is always full
        yield (skip, chat_now(), history_now(), stats_now(False), *charts.all_figures(metrics))

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
                yield loading_banner(f"Preparing drafter '{kind}'"), gr.skip(), gr.skip()
        if errors:
            gr.Warning(f"Could not prepare drafter '{kind}': {errors[0]}")
            yield _status_html(f"drafter '{kind}' failed: {errors[0]}", error=True), active, active
            return
        # the dropdown is left alone: it shows the user's latest pick, which a queued later
        # pick ("always_last") reads when it runs; writing `kind` back would undo that pick
        yield _status_html(f"drafter '{kind}' ready"), gr.skip(), kind

    def remeasure_baseline():
        """Time target-only decoding again (e.g. once the machine is quiet)."""
        try:
            baseline = service.measure_baseline()
        except Exception as exc:
            gr.Warning(f"Could not measure the baseline: {exc}")
            return gr.skip(), _status_html(f"baseline failed: {exc}", error=True)
        return (
            stats_html(None, baseline_tokens_per_s=baseline),
            _status_html(f"baseline: {baseline:.1f} tokens/s, target only, measured just now"),
        )

    def cleared_values() -> tuple:
        """An empty conversation: chatbot, chat state, history, stats, 4 figures."""
        return [], [], [], stats_html(None, baseline_tokens_per_s=service.baseline_tokens_per_s), *_empty_figures()

    def clear(request: gr.Request = None):
        stop_generation(request, discard=True)
        return cleared_values()

    with gr.Blocks(title="specchat · speculative decoding") as demo:
        gr.Markdown(
            f"## specchat · speculative decoding, token by token\n"
            f"A cheap drafter proposes γ tokens, the target model "
            f"(`{service.target_name}`) checks them all in one pass: the colors show which tokens "
            f"it accepted, resampled, or added as a bonus. The output is exactly the target's.",
            elem_classes="spec-subtitle",
        )
        history_state = gr.State([])  # plain-text turns: what the model sees
        display_state = gr.State([])  # the rendered chat: what the page shows
        active_drafter = gr.State(drafter0)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                gr.HTML(legend_html())
                load_banner = gr.HTML(loading_html(service) or "", elem_id="spec-loading")
                chatbot = gr.Chatbot(
                    label="chat",
                    show_label=False,
                    height=460,
                    render_markdown=False,  # show model text verbatim; see specchat/ui_render.py
                    latex_delimiters=[],
                    sanitize_html=True,
                    feedback_options=None,
                    buttons=[],
                    placeholder="Ask for some code. Tokens appear colored by how they were produced.",
                    elem_id="spec-chat",
                )
                with gr.Row(equal_height=True):
                    textbox = gr.Textbox(
                        show_label=False, placeholder="Message (Enter sends, Shift+Enter = new line)",
                        lines=1, max_lines=8, scale=8, container=False, elem_id="spec-input",
                    )
                    send = gr.Button("Send", variant="primary", scale=1, min_width=80)
                    pending = gr.Textbox(visible=False, label="message")
                    stop = gr.Button("Stop", variant="stop", scale=1, min_width=80)
                stats = gr.HTML(
                    stats_html(None, baseline_tokens_per_s=service.baseline_tokens_per_s),
                    elem_id="spec-stats",
                )
            with gr.Column(scale=1, min_width=260):
                drafter = gr.Dropdown(
                    choices=kinds, value=drafter0, label="drafter",
                    info="none = target only · ngram = prompt lookup · int4 = 4-bit copy · sibling = smaller model · sibling-int4 = 4-bit smaller model",
                )
                drafter_status = gr.HTML(
                    _status_html(f"drafter '{drafter0}' " + ("loading…" if loading_html(service) else "ready")),
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
                baseline_btn = gr.Button("Re-measure baseline", variant="secondary", size="sm")
                clear_btn = gr.Button("Clear chat", variant="secondary")
                gr.Examples(EXAMPLES, inputs=textbox, label="examples")
        with gr.Row():
            plot_alpha = gr.Plot(figures0[0], show_label=False, elem_id="plot-alpha", elem_classes="spec-plot")
            plot_position = gr.Plot(figures0[1], show_label=False, elem_id="plot-position", elem_classes="spec-plot")
        with gr.Row():
            plot_speed = gr.Plot(figures0[2], show_label=False, elem_id="plot-speed", elem_classes="spec-plot")
            plot_theory = gr.Plot(figures0[3], show_label=False, elem_id="plot-theory", elem_classes="spec-plot")
        with gr.Accordion("How to read this", open=False):
            gr.Markdown(EXPLAIN_MD)

        inputs = [pending, history_state, display_state, drafter, gamma, temperature, top_p, max_new_tokens, adaptive]
        outputs = [textbox, chatbot, display_state, history_state, stats, plot_alpha, plot_position, plot_speed, plot_theory]
        common = dict(
            fn=respond, inputs=inputs, outputs=outputs, show_progress="hidden",
            concurrency_limit=1, concurrency_id="model",
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
            prepare_drafter, inputs=[drafter, active_drafter],
            outputs=[drafter_status, drafter, active_drafter],
            concurrency_limit=1, concurrency_id="model", show_progress="hidden",
            trigger_mode="always_last",  # picks made while one waits: the last one wins ("once" dropped them)
            api_name="prepare_drafter",
        )
        baseline_btn.click(
            remeasure_baseline, None, [stats, drafter_status],
            concurrency_limit=1, concurrency_id="model", api_visibility="private",
        )
        def show_loading():
            """On page load: mirror the background loading progress until the models are ready;
            if the start-up drafter failed to load, switch this page to target-only and say why."""
            skip = gr.skip()
            for banner in wait_until_ready(service):
                yield banner, skip, skip, skip, skip
            if getattr(service, "startup_error", None) is not None:
                return
            stats_now = stats_html(None, baseline_tokens_per_s=service.baseline_tokens_per_s)
            error = getattr(service, "drafter_errors", {}).get(drafter0)
            if error is not None:
                text = f"drafter '{drafter0}' could not be loaded ({error}): answering with the target only"
                gr.Warning(text)
                yield "", stats_now, _status_html(text, error=True), "none", "none"
                return
            yield "", stats_now, _status_html(f"drafter '{drafter0}' ready"), skip, skip

        demo.load(
            show_loading, None, [load_banner, stats, drafter_status, drafter, active_drafter], show_progress="hidden",
            api_visibility="private",
            concurrency_limit=None,  # every open tab polls; no model work happens here
        )
        cleared = [chatbot, display_state, history_state, stats, plot_alpha, plot_position, plot_speed, plot_theory]
        clear_btn.click(clear, None, cleared, concurrency_limit=None, api_visibility="private")
        # the Chatbot's own trash button empties the display: empty the history with it
        chatbot.clear(clear, None, cleared, concurrency_limit=None, api_visibility="private")
    return demo


# ---- command line ---------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """True for localhost / 127.0.0.0/8 / ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="app.py",
        description="specchat: a local chat that shows speculative decoding at work.",
    )
    parser.add_argument(
        "--target", default=None,
        help="target model: a name from models.yaml or a local path (default: the project's default target)",
    )
    parser.add_argument(
        "--drafter", choices=DRAFTER_CHOICES, default=None,
        help="drafter selected at start (default: the first available of sibling-int4, sibling, int4, ngram)",
    )
    parser.add_argument(
        "--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        help="port to listen on (default 7860)",
    )
    parser.add_argument(
        "--dtype", choices=DTYPE_CHOICES, default="auto",
        help="weights dtype for the target and model drafters (default auto)",
    )
    return parser.parse_args(argv)


def _is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) or any(c.__name__ == "SpecchatError" for c in type(exc).__mro__)


def _announce_ready(service: Any, drafter: str) -> None:
    """Say in the terminal when the background loading has finished, or why it failed."""
    service.ready.wait()
    if service.startup_error is not None:
        print(
            f"error: loading the models failed: {service.startup_error}\n"
            "The page shows the same message. Fix the cause and restart the app.",
            file=sys.stderr,
        )
    else:
        print(
            f"Ready: {service.target_name} with drafter '{drafter}'; target-only baseline "
            f"{service.baseline_tokens_per_s:.1f} tokens/s on this machine.",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not is_loopback(args.host):
        print(
            f"WARNING: listening on {args.host}: the chat (and the models' compute) becomes "
            "reachable from the network. Use --host 127.0.0.1 to keep it on this machine.",
            file=sys.stderr,
        )
    try:
        service = get_service(target=args.target, dtype=args.dtype)
        kinds = list(service.drafter_kinds())
        if args.drafter is not None and args.drafter not in kinds:
            raise ValueError(
                f"drafter '{args.drafter}' is not available for {service.target_name}; "
                f"available: {', '.join(kinds)}"
            )
        drafter = _pick_drafter(kinds, args.drafter)
    except Exception as exc:
        if _is_user_error(exc):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    # Load in the background: the page opens at once and shows the same progress as the
    # terminal (the first start converts the models, later starts load from the cache).
    print(
        f"Loading {service.target_name} with drafter '{drafter}' (progress below and in the browser)…",
        file=sys.stderr,
    )
    service.start(drafter)
    threading.Thread(target=_announce_ready, args=(service, drafter), daemon=True).start()
    demo = build_ui(service, default_drafter=drafter)
    demo.queue(default_concurrency_limit=1)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=False,
        ssr_mode=False,
        css=CSS,
        run_history=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
