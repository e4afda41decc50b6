"""The process's one loaded ChatService, its loading banners, and how a reply streams on ZeroGPU.

The models live in one module-level :class:`~specchat.service.ChatService` (loaded once, behind a
lock, never in ``gr.State``); every browser session of the page shares it. On a ZeroGPU Space each
reply runs in the ``spaces.GPU`` worker (:mod:`specchat.ui.page.zerogpu`). :class:`TraceOnlyService`
stands in for it when the page only shows recorded traces.
"""

from __future__ import annotations

import html
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from specchat.errors import SpecchatError
from specchat.service_api import ChatServiceProtocol, Notice, Pick
from specchat.ui.html.render import status_html

if TYPE_CHECKING:
    from specchat.analysis.calibrate import Calibration
    from specchat.analysis.ledger import ModelSizes
    from specchat.core.config import CancelFlag, GenerationConfig
    from specchat.core.draft import Drafter
    from specchat.core.events import Event
    from specchat.runtimes.chat import Message
    from specchat.runtimes.compiled import CompiledTarget
    from specchat.runtimes.select import RuntimeChoice
    from specchat.service import ChatService

# ---- optional ZeroGPU (Hugging Face Spaces) -----------------------------------------------
ON_SPACES = os.environ.get("SYSTEM") == "spaces"  # a Hugging Face Space: public by design, no loopback warning
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


def get_service(
    *, target: str | None = None, dtype: str = "auto", device: str | None = None, compile: bool = False,
    runtime: str = "transformers", threads: int | None = None,
) -> ChatService:
    """The module-level ChatService, created on first use (thread-safe). Loads nothing:
    ``service.start(drafter)`` loads the models in the background."""
    global _SERVICE
    with _SERVICE_LOCK:
        if _SERVICE is None:
            from specchat.service import ChatService

            _SERVICE = ChatService(target=target, dtype=dtype, device=device, compile=compile, runtime=runtime,
                                   threads=threads)
        return _SERVICE


def loading_html(service: ChatServiceProtocol) -> str | None:
    """A progress banner while the service loads in the background; None once it is ready."""
    error = service.startup_error
    if error is not None:
        return status_html(f"Loading the models failed: {error}", error=True)
    return loading_banner("Loading models") if service.loading else None


def compile_note(service: ChatServiceProtocol, drafter: str | None = None) -> str:
    """For the drafter's status line: what runs the target and the drafter (transformers or
    llama.cpp, the weights' bits, llama.cpp's threads) and where ``--compile`` stands."""
    described = service.runtime_description(drafter)
    runtime = f" · {described}" if described else ""
    return runtime + (_compile_state(service) if service.compile else "")


def _compile_state(service: ChatServiceProtocol) -> str:
    if service.compiled is not None:
        return " · target compiled (static cache, --compile)"
    return (" · the target's passes are being compiled in the background (a few minutes): "
            "replies run eagerly until then, faster after")


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


def wait_until_ready(service: ChatServiceProtocol, poll_s: float = 0.5, cancel: CancelFlag | None = None) -> Iterator[str]:
    """Yield the loading banner every ``poll_s`` seconds until the service is ready (or cancel)."""
    while (banner := loading_html(service)) is not None:
        yield banner
        if service.startup_error is not None or (cancel is not None and cancel.is_set()):
            return
        time.sleep(poll_s)


# Stop on ZeroGPU: a shared slot made here, before ZeroGPU forks its worker (specchat.ui.page.zerogpu).
_ZEROGPU_SLOT = None
if ON_ZEROGPU:
    from specchat.ui.page.zerogpu import CancelSlot

    _ZEROGPU_SLOT = CancelSlot()


@gpu(duration=120)
def _stream_on_zerogpu(history, message, drafter, config, generation, continue_from=None):
    """ZeroGPU runs this in a forked worker: plain data in (the settings as specchat.ui.page.zerogpu.to_plain
    gives them), plain data out; the module-level service generates, and stops when the slot says so."""
    from specchat.ui.page.zerogpu import worker_stream

    assert _SERVICE is not None and _ZEROGPU_SLOT is not None  # made before ZeroGPU forked this worker
    yield from worker_stream(_SERVICE, _ZEROGPU_SLOT, history, message, drafter, config, generation, continue_from)


def stream_fn(service: ChatServiceProtocol) -> Callable[..., Iterator[Any]] | None:
    """How a session streams a reply: through ZeroGPU's worker on Spaces, else the service itself."""
    slot = _ZEROGPU_SLOT
    if ON_ZEROGPU and slot is not None and service is _SERVICE:
        from specchat.ui.page.zerogpu import app_stream

        return lambda history, message, drafter, config, cancel, continue_from=None: app_stream(
            _stream_on_zerogpu, slot, history, message, drafter, config, cancel, continue_from)
    return None


class TraceOnlyService:
    """The service interface (:class:`~specchat.service_api.ChatServiceProtocol`) with no model:
    ``python app.py --trace FILE`` shows recorded traces (every view works) and refuses to
    generate (:class:`~specchat.errors.SpecchatError`)."""

    runtime = "transformers"  # nothing runs; the name the page's defaults expect
    compile = False
    startup_error: BaseException | None = None
    picked: Pick | None = None
    calibration: Calibration | None = None
    runtime_choice: RuntimeChoice | None = None
    compiled: CompiledTarget | None = None
    loading = False
    banner = status_html(
        "Showing recorded traces: no model is loaded. Every view works; sending and racing need the app "
        "started without --trace."
    )

    def __init__(self, target_name: str):
        self.target_name = target_name
        self.ready = threading.Event()
        self.ready.set()
        self.drafter_errors: dict[str, BaseException] = {}

    @property
    def context_length(self) -> int:
        raise _no_model()

    def runtime_description(self, drafter: str | None = None) -> str:
        return ""

    def drafter_kinds(self) -> list[str]:
        return ["none"]

    def prepare_drafter(self, kind: str) -> Drafter | None:
        return None  # every kind answers target-only (nothing generates here)

    def hybrid_part(self) -> str:
        raise _no_model()

    def model_sizes(self, drafter: str) -> ModelSizes | None:
        return None

    def encode_chat(self, history: list[Message], message: str, max_new_tokens: int) -> tuple[list[int], str | None]:
        raise _no_model()

    def generate(
        self, input_ids: list[int], *, drafter: str, config: GenerationConfig,
        cancel: CancelFlag | None = None, prefill_progress: bool = False,
    ) -> Iterator[Event]:
        raise _no_model()

    def stream_chat(
        self, history: list[Message], message: str, *, drafter: str, config: GenerationConfig,
        cancel: CancelFlag | None = None, prefill_progress: bool = False, continue_from: str | None = None,
    ) -> Iterator[Event | Notice]:
        raise _no_model()

    def forget_prefix(self) -> None:
        return None  # nothing is kept

    def start(self, drafter: str) -> threading.Thread:
        raise _no_model()

    def retarget(self, target: str) -> None:
        raise _no_model()


def _no_model() -> SpecchatError:
    return SpecchatError(
        "no model is loaded: this page shows recorded traces. Start `python app.py` without --trace to chat."
    )


if TYPE_CHECKING:  # both services implement the interface the page uses (checked by mypy)
    _SERVICES: tuple[type[ChatServiceProtocol], ...] = (ChatService, TraceOnlyService)
