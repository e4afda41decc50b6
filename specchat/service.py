"""Loaded models + prompts → event streams: the one object the app and the CLI talk to.

Holds the target, its tokenizer, the engine and every drafter loaded so far. Switching the
drafter never reloads the target. Generation is serialised by a lock (one at a time).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from specchat import loading
from specchat.chat import Message, build_chat_prompt
from specchat.config import GenerationConfig
from specchat.drafters import Drafter, ModelDrafter, NgramDrafter
from specchat.engine import SpeculativeEngine
from specchat.errors import SpecchatError
from specchat.events import Event
from specchat.metrics import SpeculationMetrics
from specchat.progress import BOARD
from specchat.registry import DRAFTER_KINDS, ModelEntry, Registry, load_registry  # noqa: F401 (re-export)

logger = logging.getLogger(__name__)


# End-of-turn markers of common chat templates; added to the EOS ids when the vocab has them.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")

BASELINE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


@dataclass(frozen=True)
class Notice:
    """A message for the user that is not part of the reply (e.g. history was trimmed).
    ``warning`` marks one the user should not miss (the drafter could not be used)."""

    text: str
    warning: bool = False


class ChatService:
    """Owns the loaded target, tokenizer and drafters.

    Args:
        target: a models.yaml name or a local Hugging Face-format directory; None = default.
        dtype: "auto" | "float32" | "bfloat16" | "float16" (see ``loading.resolve_dtype``).
        device: "cpu", "cuda", …; None picks CUDA when available.
        registry: a loaded registry; None loads models.yaml.
        drafter_model: overrides the sibling drafter (a registry name or local directory).

    Raises:
        RegistryError: unknown target name or bad models.yaml.
    """

    def __init__(
        self,
        *,
        target: str | None = None,
        dtype: str = "auto",
        device: str | None = None,
        registry: Registry | None = None,
        drafter_model: str | None = None,
    ):
        self.registry = registry or load_registry()
        self.target_entry: ModelEntry = self.registry.resolve(target or self.registry.default_target)
        self.target_name = self.target_entry.name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = loading.resolve_dtype(dtype, self.device)
        self.drafter_model = drafter_model
        self.baseline_tokens_per_s: float | None = None
        self.target_path: Path | None = None
        self.engine: SpeculativeEngine | None = None
        self._drafters: dict[str, Drafter | None] = {"none": None}
        # drafters whose loading failed (kind -> the error); chat turns then answer target-only
        # without retrying, an explicit prepare_drafter() retries
        self.drafter_errors: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self._started = False

    @property
    def loading(self) -> bool:
        """True while :meth:`start`'s background loading runs."""
        return self._started and not self.ready.is_set()

    # -- background start-up (the app) -----------------------------------------------------
    def start(self, drafter: str) -> threading.Thread:
        """Load the target, prepare ``drafter`` and measure the baseline in a background thread.

        ``ready`` is set when done; on failure ``startup_error`` holds the exception and
        ``ready`` is set too. Progress is reported on ``specchat.progress.BOARD``.
        """

        self._started = True

        def run() -> None:
            try:
                self.load()
                try:
                    self.prepare_drafter(drafter)
                except Exception as exc:  # the target works: go on, the chat falls back to target-only
                    BOARD.stage(f"Drafter '{drafter}' failed to load: {exc}; the target answers alone")
                    logger.error("loading drafter %r failed; continuing with the target only", drafter, exc_info=exc)
                BOARD.stage("Measuring target-only speed on this machine (the baseline)")
                self.measure_baseline()
                BOARD.stage("Ready")
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
            BOARD.stage(f"Preparing target {self.target_name} (the first start converts it once)")
            self.target_path = loading.ensure_local(self.target_entry)
            BOARD.stage(f"Loading target {self.target_name}")
            try:
                self.tokenizer = loading.load_tokenizer(self.target_path)
                model = loading.load_model(self.target_path, dtype=self.dtype, device=str(self.device))
            except loading.ModelSourceError as exc:
                raise loading.damaged_cache_error(self.target_entry, self.target_path, exc) from exc
            self.engine = SpeculativeEngine(
                model,
                self.tokenizer,
                eos_token_ids=eos_token_ids(model, self.tokenizer),
                context_length=self.target_entry.context_length,
            )

    @property
    def context_length(self) -> int:
        return self._engine().context_length

    def drafter_kinds(self) -> list[str]:
        """Drafter kinds available for this target, in display order."""
        kinds = self.target_entry.drafter_kinds()
        if self.drafter_model and "sibling" not in kinds:
            kinds += ["sibling", "sibling-int4"]
        return kinds

    def prepare_drafter(self, kind: str) -> Drafter | None:
        """Load (once) and return the drafter of this kind; None for target-only. A loading
        failure is kept in ``drafter_errors[kind]`` (cleared by a later success).

        Raises:
            ValueError: unknown kind, or sibling without a sibling model.
            TokenizerMismatchError: the sibling's tokenizer differs from the target's.
            ModelSourceError, ChecksumError: its files are missing or damaged.
        """
        with self._load_lock:
            if kind not in self._drafters and kind not in self.drafter_kinds():
                raise ValueError(
                    f"drafter {kind!r} is not available for {self.target_name}; "
                    f"choose one of {', '.join(self.drafter_kinds())}"
                )
            try:
                drafter = self._prepare_drafter(kind)
            except Exception as exc:
                self.drafter_errors[kind] = exc
                raise
            self.drafter_errors.pop(kind, None)
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
        )

    def _prepare_drafter(self, kind: str) -> Drafter | None:
        if kind in self._drafters:
            return self._drafters[kind]
        engine = self._engine()
        vocab = engine.vocab_size
        if kind == "ngram":
            drafter: Drafter = NgramDrafter(self.device)
        elif kind == "int4":
            BOARD.stage(f"Quantizing {self.target_name} to int4 for the int4 drafter (about a minute on 2 CPU cores)")
            model = loading.load_model(self.target_path, dtype=self.dtype, device=str(self.device), int4=True)
            drafter = ModelDrafter(
                model, target_vocab_size=vocab, num_tokenizer_ids=len(self.tokenizer), name="int4", device=self.device
            )
        else:  # sibling, sibling-int4
            entry = self.registry.resolve(self.drafter_model or self.target_entry.drafters["sibling"])
            BOARD.stage(f"Preparing sibling drafter {entry.name} (the first start converts it once)")
            path = loading.ensure_local(entry)
            try:
                drafter_tokenizer = loading.load_tokenizer(path)
                loading.check_same_tokenizer(
                    self.tokenizer, drafter_tokenizer, target_name=self.target_name, drafter_name=entry.name
                )
                int4 = kind == "sibling-int4"
                if int4:
                    BOARD.stage(f"Quantizing sibling {entry.name} to int4 (about 10 s on 2 CPU cores)")
                model = loading.load_model(path, dtype=self.dtype, device=str(self.device), int4=int4)
            except loading.ModelSourceError as exc:
                raise loading.damaged_cache_error(entry, path, exc) from exc
            drafter = ModelDrafter(
                model, target_vocab_size=vocab, num_tokenizer_ids=len(self.tokenizer), name=kind, device=self.device
            )
        self._drafters[kind] = drafter
        return drafter

    # -- prompts --------------------------------------------------------------------------
    def encode_plain(self, text: str) -> list[int]:
        """Plain-text prompt → ids (the tokenizer's own special tokens, e.g. BOS, included).

        Raises:
            ValueError: the prompt is empty.
        """
        if not text:
            raise ValueError("the prompt is empty")
        return list(self.tokenizer(text).input_ids)

    def encode_chat(self, history: list[Message], message: str, max_new_tokens: int) -> tuple[list[int], str | None]:
        """History + message → prompt ids with the chat template, and a notice if trimmed."""
        prompt = build_chat_prompt(
            self.tokenizer, history, message, context_length=self.context_length, max_new_tokens=max_new_tokens
        )
        notice = None
        if prompt.num_dropped_messages:
            notice = (
                f"The conversation is longer than the {self.context_length}-token context window: "
                f"the {prompt.num_dropped_messages} oldest message(s) were left out of this prompt."
            )
        return prompt.input_ids, notice

    # -- generation -----------------------------------------------------------------------
    def generate(
        self,
        input_ids: list[int],
        *,
        drafter: str,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream events for a prompt of token ids (see ``SpeculativeEngine.generate``)."""
        drafter_obj = self.prepare_drafter(drafter)
        with self._lock:
            yield from self._engine().generate(input_ids, drafter_obj, config, cancel)

    def stream_chat(
        self,
        history: list[Message],
        message: str,
        *,
        drafter: str,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event | Notice]:
        """Chat turn: plain-text history (``[{"role", "content"}]``) + message → events.

        A drafter that cannot be loaded, or that fails while generating (e.g. out of memory),
        does not end the turn: the reply is generated by the target alone, with a warning
        (a Notice, or the engine's DrafterFailedEvent).

        Raises:
            ValueError: empty message, a message that alone does not fit the context, or a
                drafter kind this target does not have.
        """
        ids, notice = self.encode_chat(history, message, config.max_new_tokens)
        if notice:
            yield Notice(notice)
        drafter, fallback = self.drafter_for_chat(drafter)
        if fallback is not None:
            yield fallback
        yield from self.generate(ids, drafter=drafter, config=config, cancel=cancel)

    def measure_baseline(self, num_tokens: int = 32, warmup_tokens: int = 4) -> float:
        """Time target-only greedy decoding on this machine; sets ``baseline_tokens_per_s``.

        One short untimed run first: the first forward passes of a process are several times
        slower (allocator and kernel warm-up) and would make every speedup look too good.
        Returns tokens/s of decoding (prefill excluded), the same measure the app shows.
        """
        ids, _ = self.encode_chat([], BASELINE_PROMPT, num_tokens)
        for _ in self.generate(ids, drafter="none", config=GenerationConfig(max_new_tokens=warmup_tokens)):
            pass
        metrics = SpeculationMetrics()
        for event in self.generate(ids, drafter="none", config=GenerationConfig(max_new_tokens=num_tokens)):
            metrics.update(event)
        self.baseline_tokens_per_s = metrics.tokens_per_s
        return self.baseline_tokens_per_s

    def _engine(self) -> SpeculativeEngine:
        if self.engine is None:
            raise SpecchatError("the target model is not loaded yet: call load() first")
        return self.engine


def eos_token_ids(model, tokenizer) -> set[int]:
    """EOS ids of the model: generation config, tokenizer, and end-of-turn chat markers."""
    ids: set[int] = set()
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is not None:
        ids.update([eos] if isinstance(eos, int) else eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in _END_OF_TURN_TOKENS if t in vocab)
    return ids
