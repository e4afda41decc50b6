"""Pick the drafter by measurement on the machine at hand.

Which model drafter is fastest depends on the machine more than on the models: bitsandbytes'
CPU 4-bit path is fast on one CPU and slow on another (on a 2-vCPU AMD EPYC the NF4 sibling was
the fastest drafter; on a 2-vCPU Intel Xeon the bf16 sibling beat both NF4 drafters), so a
hard-coded default is wrong on some machines. The calibration times each model drafter the
target offers on one short greedy reply to a fixed message, back to back with target-only
replies to the same message, and keeps the result per machine and model pair in specchat's cache
(``<cache>/calibration.json``); it is redone when the machine (CPU, threads, device, dtype,
library versions) or either model (its models.yaml entry) changes.

Like for like: every drafter's decode rate is divided by the mean of the target-only rates
measured just before and just after it, on the same prompt, in the same process and under the
same load; nothing is reused from another moment. The figure is a speedup of decoding
(prefill excluded), the one the app shows.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, Event, RoundEvent
from specchat.drafters import kinds as drafter_kinds
from specchat.runtimes import llamacpp, select
from specchat.runtimes.select import cpu_name

if TYPE_CHECKING:
    import torch

    from specchat.runtimes.chat import Message
    from specchat.runtimes.registry import ModelEntry, Registry

CALIBRATION_MESSAGE = (
    "Write a Python function is_palindrome(text) that ignores case, spaces and punctuation, "
    "with a docstring and two examples."
)
"""The message every calibration reply answers: code written from scratch, where a model
drafter has to earn its keep (nothing to copy from the prompt)."""

NUM_TOKENS = 32
"""Tokens per calibration reply: enough rounds for a drafter's α to show, short enough that
calibrating three drafters takes about a minute on a 2-core CPU."""

FILE_NAME = "calibration.json"
UNSTEADY_SPREAD = 0.25
"""Target-only rates of one calibration that differ by more than this (of their median) mean a
busy machine: it measures once more, and a record still that unsteady says so."""
VERSION = 1  # bump when what is measured changes: older records are then ignored


@dataclass(frozen=True)
class DrafterTiming:
    """One drafter's calibration reply.

    Attributes:
        kind: the drafter kind.
        tokens_per_s: decode rate, tokens per second (prefill excluded).
        speedup: ``tokens_per_s`` ÷ the target-only rate of the same calibration.
        alpha: acceptance rate α of the reply (accepted ÷ drafted), None if nothing was drafted.
        draft_ms_per_token: drafter time per drafted token, milliseconds.
        drafted_per_round: tokens drafted per drafting round (γ as adaptive γ chose it; None in
            records made before it was kept). A drafter's time per token depends on it: each
            round's first pass also reads the tokens the last round committed (measured on a
            2-core CPU, the 0.5B sibling against its 1.5B target, fixed γ, a short prompt:
            c = 1.07 at γ = 1, 0.77 at 2, 0.67 at 4, 0.60 at 8).
    """

    kind: str
    tokens_per_s: float
    speedup: float
    alpha: float | None
    draft_ms_per_token: float | None
    drafted_per_round: float | None = None


@dataclass
class Calibration:
    """A calibration on record: the key it is valid for, the target-only rate and each drafter.

    Attributes:
        key: :func:`calibration_key` of the machine and model pair measured.
        target_tokens_per_s: target-only decode rates (tokens/s): before the first drafter and
            after each (one more than ``drafters``).
        drafters: one :class:`DrafterTiming` per model drafter, in the order timed.
        num_tokens: tokens per reply.
        measured_at: when (UTC, ISO 8601).
        unsteady: the spread of the target-only rates (:func:`rate_spread`) when it stayed above
            :data:`UNSTEADY_SPREAD` after measuring twice, else None.
    """

    key: dict
    target_tokens_per_s: list[float]
    drafters: list[DrafterTiming]
    num_tokens: int = NUM_TOKENS
    measured_at: str = ""
    version: int = field(default=VERSION)
    unsteady: float | None = None  # the target-only rates' spread when above UNSTEADY_SPREAD (a busy machine)

    @property
    def fastest(self) -> DrafterTiming | None:
        """The drafter with the highest measured speedup (None when none was timed)."""
        return max(self.drafters, key=lambda d: d.speedup, default=None)

    def reason(self, picked: str) -> str:
        """One sentence for the user: why ``picked`` is the default, with the numbers."""
        if not self.drafters:
            return ("no model drafter was timed on this machine (none loaded; on llama.cpp the int4 kinds are not "
                    "timed: their lower-bit copy is made when one is picked)")
        ranked = sorted(self.drafters, key=lambda d: -d.speedup)
        figures = ", ".join(f"{d.kind} {d.speedup:.2f}×" for d in ranked)
        best = ranked[0]
        base = (f"{figures} target-only's decode speed, measured here on {self.measured_at[:10]} "
                f"({self.num_tokens} tokens each)")
        if self.unsteady is not None:
            base += (f"; target-only speed varied by {self.unsteady:.0%} while it was measured (a busy machine): "
                     "`specchat calibrate --again` measures it again, and while other work keeps a core busy "
                     "`--threads` below the number of cores can be much faster")
        if picked == "hybrid":
            return f"hybrid = lookup first, then {best.kind}, the fastest model drafter: {base}"
        if picked == best.kind:
            return f"{picked} is the fastest model drafter: {base}"
        return f"no model drafter sped decoding up: {base}"

    def cost_ratio(self, kind: str) -> float | None:
        """c of ``kind`` as timed here: its drafter time per drafted token over one target-only
        step (1000 ms / the median target-only rate of the calibration); None when not timed."""
        timing = next((d for d in self.drafters if d.kind == kind), None)
        if timing is None or timing.draft_ms_per_token is None or not self.target_tokens_per_s:
            return None
        return timing.draft_ms_per_token / (1000.0 / statistics.median(self.target_tokens_per_s))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        """Raises ValueError (or KeyError/TypeError) on a record of another shape."""
        if data.get("version") != VERSION:
            raise ValueError(f"calibration record version {data.get('version')!r}, need {VERSION}")
        drafters = [DrafterTiming(**d) for d in data["drafters"]]
        unsteady = data.get("unsteady")
        return cls(dict(data["key"]), [float(x) for x in data["target_tokens_per_s"]], drafters,
                   int(data["num_tokens"]), str(data["measured_at"]), VERSION,
                   None if unsteady is None else float(unsteady))


class KeyedService(Protocol):
    """What :func:`calibration_key` reads of a service (:class:`specchat.service.ChatService`): its
    machine settings and model pair."""

    target_entry: ModelEntry
    drafter_model: str | None  # a sibling that replaces the target's own, if given
    registry: Registry
    device: torch.device
    dtype: torch.dtype
    runtime: str  # "transformers" | "llamacpp"
    threads: int | None  # llama.cpp's CPU threads (None: every CPU)


class CalibratedService(KeyedService, Protocol):
    """What :func:`calibrate` uses of a service (:class:`specchat.service.ChatService`) besides
    its key (:class:`KeyedService`): its drafters, prompts and generation."""

    drafter_errors: dict[str, BaseException]

    def model_drafter_kinds(self) -> list[str]:
        """The target's drafter kinds that run a model of their own."""
        ...

    def prepare_drafter(self, kind: str) -> Any:
        """Load ``kind`` (raises when it cannot be loaded)."""
        ...

    def warm_up(self, drafter: str = "none", num_tokens: int = 8) -> None:
        """One short untimed generation with ``drafter`` and one target-only."""
        ...

    def encode_chat(self, history: list[Message], message: str, max_new_tokens: int) -> tuple[list[int], str | None]:
        """History + message -> prompt ids, and a notice if trimmed."""
        ...

    def generate(self, input_ids: list[int], *, drafter: str, config: GenerationConfig) -> Iterator[Event]:
        """The events of one generation (``SpeculativeEngine.generate``)."""
        ...


def calibration_key(service: KeyedService) -> dict:
    """What a calibration is valid for: the machine (CPU model, cores, torch threads, device,
    dtype, runtime, llama.cpp threads and library, torch / transformers / bitsandbytes versions) and the model pair (a hash of the
    target's and the sibling's models.yaml entries, which name their weights' checksums)."""
    import torch
    import transformers

    try:  # the installed version, without importing it (slow, and it prints about missing kernels)
        bnb = importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:  # not installed: the NF4 drafters are not timed
        bnb = None
    entries = [service.target_entry]
    sibling = service.drafter_model or service.target_entry.sibling
    if sibling:
        entries.append(service.registry.resolve(sibling))
    digest = hashlib.sha256(
        "\n".join(e.model_dump_json() for e in entries).encode("utf-8")
    ).hexdigest()[:16]
    return {
        "processor": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(service.device),
        "gpu": torch.cuda.get_device_name(service.device) if service.device.type == "cuda" else None,
        "dtype": str(service.dtype).replace("torch.", ""),
        "runtime": service.runtime,
        "threads": service.threads,
        "llama_library": llamacpp.library_name() if service.runtime == "llamacpp" else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bitsandbytes": bnb,
        "models": [e.name for e in entries],
        "models_hash": digest,
    }


def default_path() -> Path:
    """``<specchat's cache>/calibration.json`` (see :func:`specchat.runtimes.loading.cache_root`)."""
    from specchat.runtimes.loading import cache_root

    return cache_root() / FILE_NAME


def load(key: dict, path: Path | None = None) -> Calibration | None:
    """The calibration on record for ``key``, or None (no file, an unreadable one, or none for
    this machine and model pair)."""
    data = select.find_record(path or default_path(), key)
    try:
        return Calibration.from_json(data) if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None


def save(calibration: Calibration, path: Path | None = None) -> Path:
    """Record ``calibration``, replacing any earlier one for the same key (others are kept:
    a cache shared by two machines or model pairs holds one record each). Written atomically."""
    return select.keep_record(path or default_path(), calibration.to_json())


def _reply(service: CalibratedService, prompt_ids: list[int], kind: str,
           num_tokens: int) -> tuple[float, float | None, float | None, float | None]:
    """(decode tokens/s, α, draft ms per drafted token, tokens drafted per drafting round) of one
    greedy reply with adaptive γ, as the app runs it (timing rounds off: the rate is compared with
    separate target-only replies)."""
    config = GenerationConfig(max_new_tokens=num_tokens, num_speculative_tokens=8, adaptive_gamma=True,
                              measure_speedup=False)
    drafted = accepted = drafting_rounds = 0
    draft_ms = 0.0
    done = None
    for event in service.generate(prompt_ids, drafter=kind, config=config):
        if isinstance(event, RoundEvent):
            drafted += event.num_drafted
            drafting_rounds += bool(event.num_drafted)
            accepted += event.num_accepted
            draft_ms += event.draft_ms
        elif isinstance(event, DoneEvent):
            done = event
    if done is None or not done.token_ids or done.decode_ms <= 0:
        raise RuntimeError(f"the calibration reply with drafter {kind!r} produced no tokens")
    rate = len(done.token_ids) / (done.decode_ms / 1000)
    return (rate, (accepted / drafted if drafted else None), (draft_ms / drafted if drafted else None),
            (drafted / drafting_rounds if drafting_rounds else None))


def calibrate(service: CalibratedService, kinds: list[str] | None = None, *, num_tokens: int = NUM_TOKENS,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Time each model drafter (default: every one the target offers) against target-only.

    Order: an untimed warm-up reply of the target and of each drafter, then target-only, drafter 1, target-only, drafter 2, …,
    target-only; each drafter's speedup is its decode rate ÷ the mean rate of the two
    target-only replies around it. A drafter that fails to load is left out (its error stays
    in ``service.drafter_errors``).

    Returns:
        the :class:`Calibration` (not yet saved: see :func:`save`).
    """
    say = progress or (lambda text: None)
    if kinds is None:  # on llama.cpp not the int4 kinds: their copies are made when picked (kinds.default_order)
        kinds = [k for k in service.model_drafter_kinds()
                 if not (service.runtime == "llamacpp" and drafter_kinds.get(k).int4)]
    kinds = [k for k in kinds if drafter_kinds.get(k).own_model]
    prompt_ids, _ = service.encode_chat([], CALIBRATION_MESSAGE, num_tokens)
    say("Calibrating: warming up the target")
    service.warm_up("none", num_tokens=4)
    ready = []
    for kind in kinds:
        say(f"Calibrating: loading drafter '{kind}'")
        try:
            service.prepare_drafter(kind)
        except Exception:
            continue
        say(f"Calibrating: warming up '{kind}'")
        _reply(service, prompt_ids, kind, 4)  # untimed: a model's first passes are slow
        ready.append(kind)
    base_rates, timings = _measure(service, prompt_ids, ready, num_tokens, say)
    spread = rate_spread(base_rates)
    if spread > UNSTEADY_SPREAD:  # a busy moment: once more, and the steadier of the two is kept
        say(f"Calibrating: target-only speed varied by {spread:.0%} (a busy machine? if other work keeps a core busy, "
            "--threads below the number of cores can be much faster): measuring again")
        again = _measure(service, prompt_ids, ready, num_tokens, say)
        if rate_spread(again[0]) < spread:
            base_rates, timings = again
            spread = rate_spread(base_rates)
    return Calibration(calibration_key(service), base_rates, timings, num_tokens,
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       unsteady=spread if spread > UNSTEADY_SPREAD else None)


def rate_spread(rates: list[float]) -> float:
    """(max − min) / median of target-only rates: how much they varied while measured."""
    return (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0


def _measure(service: CalibratedService, prompt_ids: list[int], kinds: list[str], num_tokens: int,
             say: Callable[[str], None]) -> tuple[list[float], list[DrafterTiming]]:
    """Target-only before and after every drafter: each drafter is compared with the mean of the
    two target-only replies next to it (drift and load hit both alike)."""
    say("Calibrating: target only")
    base_rates = [_reply(service, prompt_ids, "none", num_tokens)[0]]
    timings = []
    for kind in kinds:
        say(f"Calibrating: drafter '{kind}' ({num_tokens} tokens)")
        rate, alpha, ms, per_round = _reply(service, prompt_ids, kind, num_tokens)
        say("Calibrating: target only")
        base_rates.append(_reply(service, prompt_ids, "none", num_tokens)[0])
        timings.append(DrafterTiming(kind, rate, rate / statistics.mean(base_rates[-2:]), alpha, ms, per_round))
    return base_rates, timings


def menu_label(kind: str, calibration: Calibration | None) -> str:
    """The drafter menu's entry for ``kind``, with what it costs on this machine when calibrated:
    ``sibling · costs 0.41 target steps a token here`` (c, the cost ratio), or for a drafter whose
    step costs more than a target step ``int4 · costs 1.54 target steps a token here: cannot pay``
    (S(γ) > 1 needs α > c, and α <= 1);
    the hybrid's is its model part's (``hybrid_part``), its lookup rounds cost nothing. With the
    tokens drafted a round known: ``sibling · costs 0.60 target steps a token here (7 drafted a
    round)``, since c is dearer when fewer are drafted a round (:class:`DrafterTiming`) and a
    reply's own c, at its own γ, may read higher."""
    c = calibration.cost_ratio(kind) if calibration is not None else None
    if c is None:
        return kind
    timing = next((d for d in calibration.drafters if d.kind == kind), None) if calibration is not None else None
    per_round = getattr(timing, "drafted_per_round", None)
    at = f" ({per_round:.0f} drafted a round)" if per_round else ""
    if c >= 1.0:
        return f"{kind} · costs {c:.2f} target steps a token here{at}: cannot pay"
    return f"{kind} · costs {c:.2f} target steps a token here{at}"


def pick(calibration: Calibration | None, available: list[str], runtime: str = "transformers") -> str:
    """The default drafter from a calibration: ``hybrid`` (lookup first, then the fastest
    model drafter) when a model drafter sped decoding up (speedup > 1), else ``ngram`` (free:
    it never costs more than a lookup), else ``none``. Without a calibration: the first of
    :func:`~specchat.drafters.kinds.default_order` of ``runtime`` that is available."""
    if calibration is None:
        return next((k for k in drafter_kinds.default_order(runtime) if k in available), "none")
    best = calibration.fastest
    if best is not None and best.speedup > 1.0 and "hybrid" in available:
        return "hybrid"
    if best is not None and best.speedup > 1.0 and best.kind in available:
        return best.kind
    return "ngram" if "ngram" in available else "none"
