"""Loaded models + prompts → event streams: the one object the app and the CLI talk to.
Holds the target, its tokenizer, the engine and every drafter loaded so far. Switching the drafter
never reloads the target. Generation is serialised by a lock (one at a time)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specchat.analysis import calibrate
from specchat.analysis.ledger import ModelSize, ModelSizes
from specchat.core.config import CancelFlag, GenerationConfig
from specchat.core.draft import Drafter
from specchat.core.engine import SpeculativeEngine
from specchat.core.events import Event
from specchat.core.runtime import ForkableRuntime, ModelRuntime
from specchat.drafters import kinds as drafter_kinds
from specchat.drafters.hybrid import HybridDrafter
from specchat.drafters.model import ModelDrafter
from specchat.drafters.ngram import NgramDrafter
from specchat.errors import SpecchatError
from specchat.progress import BOARD
from specchat.runtimes import llamacpp, loading, select
from specchat.runtimes.chat import Message, build_chat_prompt, eos_token_ids
from specchat.runtimes.compute_thread import torch_beside_llamacpp, torch_for_models
from specchat.service_api import ChatServiceProtocol, Notice, Pick  # noqa: F401 (Notice, the protocol: re-exported)

if TYPE_CHECKING:
    from specchat.runtimes.compiled import CompiledTarget
from specchat.runtimes.registry import DRAFTER_KINDS, ModelEntry, Registry, load_registry  # noqa: F401 (re-export)

logger = logging.getLogger(__name__)


WARMUP_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


class ChatService:
    """Owns the loaded target, tokenizer and drafters (:class:`~specchat.service_api.ChatServiceProtocol`).

    Args:
        target: a models.yaml name or a local Hugging Face-format directory; None = default.
        dtype: "auto" | "float32" | "bfloat16" | "float16" (see ``loading.resolve_dtype``).
        device: "cpu", "cuda", …; None picks CUDA when available.
        registry: a loaded registry; None loads models.yaml.
        drafter_model: overrides the sibling drafter (a registry name, local directory or GGUF file).
        runtime: what runs the target and the model drafters: "transformers", "llamacpp" (a
            GGUF as it is, on llama.cpp) or "auto" (:func:`specchat.runtimes.select.choose_runtime`).
        threads: llama.cpp's CPU threads (default: every CPU this process may use).

    Raises:
        RegistryError: unknown target name or bad models.yaml.
        ValueError: a runtime this target cannot run on (the message says why).
    """

    banner = ""  # a service that generates: the page shows its loading banner, no note

    def __init__(
        self,
        *,
        target: str | None = None,
        dtype: str = "auto",
        device: str | None = None,
        registry: Registry | None = None,
        drafter_model: str | None = None,
        compile: bool = False,
        runtime: str = "transformers",
        threads: int | None = None,
    ):
        self.compile = compile  # compile the target's passes (start() does it after Ready)
        self._options = dict(dtype=dtype, device=device, drafter_model=drafter_model, compile=compile, runtime=runtime,
                             threads=threads)  # for retarget
        self.registry = registry or load_registry()
        self.target_entry: ModelEntry = self.registry.resolve(target or self.registry.default_target)
        self.target_name = self.target_entry.name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = loading.resolve_dtype(dtype, self.device)
        self.runtime_choice = select.choose_runtime(self.target_entry, runtime, self.device, threads)
        self.runtime = self.runtime_choice.name  # "transformers" | "llamacpp"
        self.threads = threads
        if self.runtime == "llamacpp":
            self.device = torch.device("cpu")  # where llama.cpp hands its logits over
        self.drafter_model = drafter_model
        self.target_path: Path | None = None
        self.engine: SpeculativeEngine | None = None
        self.tokenizer: Any = None  # the target's (a transformers tokenizer), once load() ran
        self._drafters: dict[str, Drafter | None] = {"none": None}
        self._sizes: dict[str, ModelSize] = {}  # "target" and each model drafter's kind
        # drafters whose loading failed (kind -> the error): chat turns answer target-only, prepare_drafter() retries
        self.drafter_errors: dict[str, BaseException] = {}
        self.calibration: calibrate.Calibration | None = None  # this machine's, once picked or loaded
        self.picked: Pick | None = None  # start("auto"): the drafter and why
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self._started = False

    def retarget(self, target: str) -> None:
        """Another target (a models.yaml name, a model directory, a .gguf file), same options, in
        this same object (the page's model menu; every session holds it): the new target is loaded
        first, then takes the old one's place under the generation lock; :meth:`start` then picks
        its drafter and warms up. ``drafter_model`` is not carried over.

        Raises:
            RegistryError, ValueError, ModelSourceError, OSError: not a model, or a runtime it
                cannot run on, or its files cannot be loaded (nothing changes)."""
        fresh = ChatService(target=target, registry=self.registry, **{**self._options, "drafter_model": None})  # type: ignore[arg-type]
        fresh.load()  # before the old models go: a file that is not a model changes nothing
        with self._lock, self._load_lock:
            vars(self).update({k: v for k, v in vars(fresh).items() if k not in ("_lock", "_load_lock")})
        __import__("gc").collect()  # the old models' weights (nothing refers to them any more)

    @property
    def loading(self) -> bool:
        """True while :meth:`start`'s background loading runs."""
        return self._started and not self.ready.is_set()

    # -- background start-up (the app) -----------------------------------------------------
    def start(self, drafter: str) -> threading.Thread:
        """Load the target, prepare ``drafter`` and warm both up, in a background thread.
        ``drafter="auto"``: the drafter :meth:`pick_drafter` picks (kept in :attr:`picked`).

        ``ready`` is set when done; on failure ``startup_error`` holds the exception and
        ``ready`` is set too. Progress is reported on ``specchat.progress.BOARD``.
        """
        self._started = True

        def run() -> None:
            nonlocal drafter
            try:
                self.load()
                if drafter == "auto":
                    try:
                        self.picked = Pick(*self.pick_drafter())
                        drafter = self.picked.drafter
                    except Exception as exc:  # the calibration failed: the fixed order decides
                        drafter = calibrate.pick(None, self.drafter_kinds(), self.runtime)
                        self.picked = Pick(drafter, f"the calibration failed ({exc}); the first of the default order")
                        logger.error("calibrating the drafters failed", exc_info=exc)
                try:
                    self.prepare_drafter(drafter)
                except Exception as exc:  # the target works: go on, the chat falls back to target-only
                    BOARD.stage(f"Drafter '{drafter}' failed to load: {exc}; the target answers alone")
                    logger.error("loading drafter %r failed; continuing with the target only", drafter, exc_info=exc)
                BOARD.stage("Warming up (the first forward passes of a process are slow)")
                self.warm_up(drafter)
                BOARD.stage("Ready")
                if self.compile:  # the chat answers eagerly meanwhile; later replies use the graphs
                    self.ready.set()
                    from specchat.runtimes.compiled import compile_after_ready

                    compile_after_ready(self.compile_target)
            except BaseException as exc:  # reported to the user by the app
                self.startup_error = exc
                BOARD.stage(f"Loading failed: {exc}")
                logger.error("loading the models failed", exc_info=exc)
            finally:
                self.ready.set()

        thread = threading.Thread(target=run, name="specchat-startup", daemon=True)
        thread.start()
        return thread

    # -- loading --------------------------------------------------------------------------
    def load(self) -> None:
        """Load the target and its tokenizer (first run converts and caches, with progress).

        Raises:
            ModelSourceError, ChecksumError: the model files are missing or damaged.
        """
        with self._load_lock:
            if self.engine is not None:
                return
            if self.runtime == "llamacpp":
                torch_beside_llamacpp()  # (one OpenMP pool for llama.cpp: runtimes/compute_thread.py)
                BOARD.stage(f"Loading target {self.target_name} on llama.cpp (its GGUF as it is, no conversion)")
                runtime, self.tokenizer = select.load_llamacpp(self.target_entry, threads=self.threads)
                self.target_path = runtime.weights.path
                eos = runtime.weights.end_of_generation_ids() | eos_token_ids(None, self.tokenizer)
                self.engine = SpeculativeEngine(runtime, self.tokenizer, eos_token_ids=eos)
                return
            torch_for_models()
            BOARD.stage(f"Preparing target {self.target_name} (the first start converts it once)")
            self.target_path = loading.ensure_local(self.target_entry)
            BOARD.stage(f"Loading target {self.target_name}")
            try:
                self.tokenizer = loading.load_tokenizer(self.target_path)
                model = loading.load_model(self.target_path, dtype=self.dtype, device=str(self.device))
            except loading.ModelSourceError as exc:
                raise loading.damaged_cache_error(self.target_entry, self.target_path, exc) from exc
            from specchat.runtimes.transformers import TransformersRuntime  # here: its import takes ~1.5 s

            runtime = TransformersRuntime(model, context_length=self.target_entry.context_length)
            self.engine = SpeculativeEngine(runtime, self.tokenizer, eos_token_ids=eos_token_ids(model, self.tokenizer))

    def compile_target(self, progress: Callable[[str], None] | None = None) -> CompiledTarget:
        """Compile the target's decode and verify passes (:func:`specchat.runtimes.compiled.compile_runtime`;
        a few minutes on 2 CPU cores, reported through ``progress``): generations that start
        afterwards use them. Returns the compiled target.

        Raises:
            SpecchatError: the target does not run on transformers.
        """
        from specchat.runtimes.compiled import compile_runtime

        return compile_runtime(self._engine().target, self.runtime, progress)

    @property
    def compiled(self) -> CompiledTarget | None:
        """The target's compiled passes once :meth:`compile_target` has built them, else None."""
        return None if self.engine is None else getattr(self.engine.target, "compiled", None)

    @property
    def context_length(self) -> int:
        """Positions the target may use (prompt + reply), tokens. Raises SpecchatError before load()."""
        return self._engine().context_length

    def drafter_kinds(self) -> list[str]:
        """Drafter kinds available for this target, in display order (see :attr:`unavailable_drafters`)."""
        return drafter_kinds.kinds_for(has_sibling=bool(self.drafter_model or self.target_entry.sibling),
                                       has_int4=self.runtime != "llamacpp" or llamacpp.has_quantizer())

    @property
    def unavailable_drafters(self) -> dict[str, str]:
        """Drafter kinds of the table this target does not offer on its runtime, and why."""
        return select.unavailable_drafters(self.target_name, self.drafter_kinds(), self.runtime)

    def prepare_drafter(self, kind: str) -> Drafter | None:
        """Load (once) and return the drafter of this kind; None for target-only. A loading failure is kept in
        ``drafter_errors[kind]`` (cleared by a later success); its sizes are counted, an extra that never fails it.

        Raises:
            ValueError: unknown kind, or sibling without a sibling model.
            TokenizerMismatchError: the sibling's tokenizer differs from the target's.
            ModelSourceError, ChecksumError: its files are missing or damaged.
        """
        with self._load_lock:
            if kind not in self._drafters and kind not in self.drafter_kinds():
                raise ValueError(f"drafter {kind!r} is not available for {self.target_name}; "
                                 f"choose one of {', '.join(self.drafter_kinds())}")
            try:
                drafter = self._prepare_drafter(kind)
            except Exception as exc:
                self.drafter_errors[kind] = exc
                raise
            self.drafter_errors.pop(kind, None)
            with contextlib.suppress(Exception):  # now: a GGUF header's ~1 s of CPU, else a reply's
                self.model_sizes(kind)
            return drafter

    def drafter_for_chat(self, kind: str) -> tuple[str, Notice | None]:
        """The drafter a chat turn uses: ``kind`` if it loads, else ``"none"`` and a warning
        Notice saying why (a drafter that failed before is not retried here).

        Raises:
            ValueError: ``kind`` is not a drafter of this target.
        """
        if kind not in self.drafter_errors:
            try:
                self.prepare_drafter(kind)
                return kind, None
            except Exception:
                if kind not in self.drafter_errors:  # not a loading failure: not a drafter of this target
                    raise
        return "none", Notice(
            f"The drafter '{kind}' could not be loaded ({self.drafter_errors[kind]}); this reply is "
            "generated by the target alone. Pick the drafter again in the menu to retry.",
            warning=True,
            fallback_drafter=kind,
        )

    def _prepare_drafter(self, name: str) -> Drafter | None:
        """Build the drafter ``name`` as its row of :mod:`specchat.drafters.kinds` says: from no
        model (``none``, ``lookup``), the target's weights or the sibling's, in NF4 if ``int4``."""
        if name in self._drafters:
            return self._drafters[name]
        kind = drafter_kinds.get(name)
        self._engine()  # the target comes first: a drafter is sized to its vocabulary
        drafter: Drafter | None
        if self.runtime == "llamacpp" and kind.own_model:
            drafter = self._llamacpp_drafter(name)
        elif kind.source == "lookup":
            drafter = NgramDrafter(self.device)
        elif kind.source == "target":
            assert self.target_path is not None  # load() found the target's files (a transformers one here)
            BOARD.stage(f"Quantizing {self.target_name} to int4 for the {name} drafter (about a minute on 2 CPU cores)")
            model = loading.load_model(self.target_path, dtype=self.dtype, device=str(self.device), int4=kind.int4)
            drafter = self._model_drafter(model, name)
        elif kind.source == "sibling":
            entry = self._sibling_entry()
            BOARD.stage(f"Preparing sibling drafter {entry.name} (the first start converts it once)")
            path = loading.ensure_local(entry)
            try:
                drafter_tokenizer = loading.load_tokenizer(path)
                loading.check_same_tokenizer(
                    self.tokenizer, drafter_tokenizer, target_name=self.target_name, drafter_name=entry.name
                )
                if kind.int4:
                    BOARD.stage(f"Quantizing sibling {entry.name} to int4 (about 10 s on 2 CPU cores)")
                model = loading.load_model(path, dtype=self.dtype, device=str(self.device), int4=kind.int4)
            except loading.ModelSourceError as exc:
                raise loading.damaged_cache_error(entry, path, exc) from exc
            drafter = self._model_drafter(model, name)
        elif kind.source == "hybrid":
            part = self.hybrid_part()
            BOARD.stage(f"Preparing the hybrid drafter: lookup, then '{part}'")
            model_part = self._prepare_drafter(part)
            assert isinstance(model_part, ModelDrafter) and isinstance(model_part.runtime, ForkableRuntime)  # a model kind
            # its own caches on the same weights: the standalone drafter's kept cache stays its own
            drafter = HybridDrafter(self._model_drafter_on(model_part.runtime.fork(), part), name=name)
        else:
            raise ValueError(f"drafter kind {name!r} has no way to be built (source {kind.source!r})")
        self._drafters[name] = drafter
        return drafter

    def _sibling_entry(self) -> ModelEntry:
        """The sibling drafter's entry: ``drafter_model`` if given, else the target's sibling."""
        return self.registry.resolve(self.drafter_model or self.target_entry.drafters["sibling"])

    def _llamacpp_drafter(self, name: str) -> Drafter:
        """The sibling's GGUF in a llama.cpp context of its own; for the int4 kinds a lower-bit
        copy of the sibling's or the target's GGUF (made once, then cached)."""
        kind = drafter_kinds.get(name)
        entry = self._sibling_entry() if kind.needs_sibling else self.target_entry
        BOARD.stage(f"Loading {'a lower-bit copy of ' if kind.int4 else ''}{entry.name} on llama.cpp for the "
                    f"{name} drafter" + (f" (the copy is {llamacpp.lower_bit_how()})" if kind.int4 else ""))
        if not entry.has_gguf:
            raise loading.ModelSourceError(f"drafter {entry.name!r} has no GGUF file, so llama.cpp cannot run it")
        runtime, drafter_tokenizer = select.load_llamacpp(entry, threads=self.threads, lower_bit=kind.int4)
        loading.check_same_tokenizer(self.tokenizer, drafter_tokenizer, target_name=self.target_name,
                                     drafter_name=entry.name)
        return self._model_drafter_on(runtime, name)

    def model_drafter_kinds(self) -> list[str]:
        """This target's drafter kinds that run a model of their own (int4, sibling, sibling-int4)."""
        return [k for k in self.drafter_kinds() if drafter_kinds.get(k).own_model]

    def hybrid_part(self) -> str:
        """The model drafter the hybrid falls back on: the one this machine's calibration found
        fastest (:mod:`specchat.analysis.calibrate`) when there is one on record, else the first model kind
        of :data:`~specchat.drafters.kinds.DEFAULT_ORDER` the target offers (the int4 copy for a
        target with no sibling)."""
        fastest = self.calibrated_fastest_model_kind()
        if fastest is not None:
            return fastest
        kinds = self.model_drafter_kinds()
        return next(k for k in drafter_kinds.default_order(self.runtime) if k in kinds)

    def calibrated_fastest_model_kind(self) -> str | None:
        """The model drafter kind with the best measured speed in this machine's calibration on
        record (:attr:`calibration`), or None (none yet)."""
        best = self.calibration.fastest if self.calibration is not None else None
        return best.kind if best is not None and best.kind in self.model_drafter_kinds() else None

    def pick_drafter(self, *, recalibrate: bool = False, kinds: list[str] | None = None) -> Pick:
        """The default drafter for this machine and model pair, and why: from the calibration on
        record, or a new one (timed now, about a minute with progress, then saved; see
        :mod:`specchat.analysis.calibrate`). Model drafters loaded only to be timed are released again.
        ``kinds``: the drafters to time (default: all but the int4 kinds on llama.cpp: see calibrate).

        Returns:
            ``Pick(kind, reason)``; the kind is one of :meth:`drafter_kinds`.
        """
        self._engine()
        key = calibrate.calibration_key(self)
        record = None if recalibrate else calibrate.load(key)
        loaded = set(self._drafters)
        if record is None:
            BOARD.stage("Calibrating the drafters on this machine (once per machine and model pair)")
            record = calibrate.calibrate(self, kinds, progress=BOARD.stage)
            try:
                calibrate.save(record)
            except OSError as exc:  # a read-only cache: use it now, calibrate again next start
                logger.warning("could not save the calibration: %s", exc)
        self.calibration = record
        kind = calibrate.pick(record, self.drafter_kinds(), self.runtime)
        keep = {kind, self.hybrid_part() if kind == "hybrid" else kind}
        with self._load_lock:
            for name in set(self._drafters) - loaded - keep:
                del self._drafters[name]  # loaded only to be timed: free its memory
            hybrid = self._drafters.get("hybrid")
            if isinstance(hybrid, HybridDrafter) and hybrid.model_drafter.name != self.hybrid_part():
                del self._drafters["hybrid"]  # built on another part before this calibration
        return Pick(kind, record.reason(kind))

    def loaded_drafter(self, kind: str) -> Drafter | None:
        """The drafter of ``kind`` if loaded, else None (loads nothing: :meth:`prepare_drafter` does)."""
        return self._drafters.get(kind)

    def runtime_description(self, drafter: str | None = None) -> str:
        """What runs the target and ``drafter`` (:func:`specchat.runtimes.select.describe_service`)."""
        return select.describe_service(self, drafter)

    def idle(self) -> bool:
        """Whether nothing of a generation is held (between turns): no generation holds the service
        or the engine, and the target's cache and each model drafter's hold at most the prefix
        kept for the next prompt. True before the target is loaded."""
        parts = [d.model_drafter if isinstance(d, HybridDrafter) else d for d in self._drafters.values()]
        engine_idle = self.engine is None or (self.engine.released and not self.engine.generating)
        return engine_idle and not self._lock.locked() and not any(d.active for d in parts if isinstance(d, ModelDrafter))

    def model_sizes(self, drafter: str) -> ModelSizes | None:
        """The target's and ``drafter``'s matmul weights and bytes (for ĉ and the ledger of :mod:`specchat.analysis.ledger`);
        None before the target is loaded. A drafter with no model, or one not loaded, has none. Counted once per model."""
        if self.engine is None:
            return None
        if "target" not in self._sizes:
            self._sizes["target"] = self.engine.target.model_size()
        loaded = self.loaded_drafter(drafter)
        runtime = loaded.runtime if isinstance(loaded, (ModelDrafter, HybridDrafter)) else None
        if runtime is not None and drafter not in self._sizes:
            self._sizes[drafter] = runtime.model_size()
        return ModelSizes(self._sizes["target"], self._sizes.get(drafter) if runtime is not None else None)

    def _model_drafter(self, model, name: str) -> ModelDrafter:
        from specchat.runtimes.transformers import TransformersRuntime

        return self._model_drafter_on(TransformersRuntime(model), name)

    def _model_drafter_on(self, runtime: ModelRuntime, name: str) -> ModelDrafter:
        return ModelDrafter(runtime, target_vocab_size=self._engine().vocab_size, num_tokenizer_ids=len(self.tokenizer),
                            name=name, device=self.device)

    # -- prompts --------------------------------------------------------------------------
    def encode_plain(self, text: str) -> list[int]:
        """Plain-text prompt → ids (the tokenizer's own special tokens, e.g. BOS, included).

        Raises:
            ValueError: the prompt is empty.
        """
        if not text:
            raise ValueError("the prompt is empty")
        return list(self.tokenizer(text).input_ids)

    def encode_chat(self, history: list[Message], message: str, max_new_tokens: int,
                    continue_from: str | None = None) -> tuple[list[int], str | None]:
        """History + message (+ the start of its reply, ``continue_from``) → prompt ids with the
        chat template (:func:`~specchat.runtimes.chat.build_chat_prompt`), and a notice if trimmed."""
        prompt = build_chat_prompt(self.tokenizer, history, message, context_length=self.context_length,
                                   max_new_tokens=max_new_tokens, continue_from=continue_from)
        dropped = prompt.num_dropped_messages
        notice = (f"The conversation is longer than the {self.context_length}-token context window: the {dropped} oldest "
                  f"message(s) were left out of this prompt.") if dropped else None
        return prompt.input_ids, notice

    # -- generation -----------------------------------------------------------------------
    def generate(
        self,
        input_ids: list[int],
        *,
        drafter: str,
        config: GenerationConfig,
        cancel: CancelFlag | None = None,
        prefill_progress: bool = False,
    ) -> Iterator[Event]:
        """Stream events for a prompt of token ids (see ``SpeculativeEngine.generate``)."""
        drafter_obj = self.prepare_drafter(drafter)
        with self._lock:
            yield from self._engine().generate(input_ids, drafter_obj, config, cancel, prefill_progress=prefill_progress)

    def stream_chat(
        self,
        history: list[Message],
        message: str,
        *,
        drafter: str,
        config: GenerationConfig,
        cancel: CancelFlag | None = None,
        prefill_progress: bool = False,
        continue_from: str | None = None,
    ) -> Iterator[Event | Notice]:
        """Chat turn: plain-text history (``[{"role", "content"}]``) + message → events
        (PrefillEvents first with ``prefill_progress``: the page shows a long prefill's progress);
        with ``continue_from`` (the start of the reply to ``message``) they write on from its end.

        A drafter that cannot be loaded, or that fails while generating (e.g. out of memory),
        does not end the turn: the reply is generated by the target alone, with a warning
        (a Notice, or the engine's DrafterFailedEvent).

        Raises:
            ValueError: empty message, a message that alone does not fit the context, or a
                drafter kind this target does not have.
        """
        ids, notice = self.encode_chat(history, message, config.max_new_tokens, continue_from)
        if notice:
            yield Notice(notice)
        drafter, fallback = self.drafter_for_chat(drafter)
        if fallback is not None:
            yield fallback
        yield from self.generate(ids, drafter=drafter, config=config, cancel=cancel, prefill_progress=prefill_progress)

    def forget_prefix(self) -> None:
        """Drop every kept conversation cache (the target's and each model drafter's): the next
        prompt is prefilled whole. Never needed for correctness (reuse is by matching token ids)."""
        if self.engine is not None:
            self.engine.forget_prefix()
        for drafter in self._drafters.values():
            if drafter is not None:
                drafter.forget_prefix()

    def warm_up(self, drafter: str = "none", num_tokens: int = 8) -> None:
        """Run one short untimed generation with ``drafter`` (and one target-only): the first forward
        passes of a process are several times slower (allocator and kernel warm-up), and the first reply
        should not pay for that. Nothing is kept: every speed is measured in its reply (:mod:`specchat.core.costs`)."""
        ids, _ = self.encode_chat([], WARMUP_PROMPT, num_tokens)
        for kind in dict.fromkeys(["none", drafter if drafter not in self.drafter_errors else "none"]):
            for _ in self.generate(ids, drafter=kind, config=GenerationConfig(max_new_tokens=num_tokens)):
                pass

    def _engine(self) -> SpeculativeEngine:
        if self.engine is None:
            raise SpecchatError("the target model is not loaded yet: call load() first")
        return self.engine
