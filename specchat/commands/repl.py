"""``specchat chat`` without ``--script``: a chat in the terminal.

Each reply streams token by token, coloured by how each token was produced (accepted draft,
resampled after a rejection, bonus after a fully accepted round, target when the round drafted
nothing; :mod:`rich` draws the colours, and writes plain text when the output is not a
terminal), then its summary line. The conversation is kept across turns, as in the app: each
message is sent with the history through the chat template, and the kept KV cache means a turn
reads only its new tokens. Ctrl-C stops the reply (the engine ends it at the next round; a second
Ctrl-C ends the program); Ctrl-D or ``/quit`` leaves. Commands: :data:`HELP`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from specchat.commands.common import TOKEN_STYLES, StopOnCtrlC, keys_not_echoed
from specchat.conversation import Conversation, ReplySettings
from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS, MAX_TEMPERATURE, GenerationConfig
from specchat.core.events import DoneEvent, PrefillEvent, StopReason, TokenEvent
from specchat.core.metrics import SpeculationMetrics

STYLES = TOKEN_STYLES
"""The colour of each token kind (the app's legend: accepted, resampled, bonus, target)."""

HELP = """commands:
  /drafter [NAME]        show the drafter, or switch to NAME ({kinds})
  /gamma [N|auto]        draft exactly N tokens every round, or auto: adaptive γ, up to 12
  /temperature [T]       sampling temperature, 0 = greedy (0..{max_t})
  /clear                 forget the conversation
  /help                  this list
  /quit                  leave (or Ctrl-D)
Ctrl-C stops a reply; the conversation keeps what was written."""


@dataclass
class ReplState:
    """What the next reply runs with, and the conversation so far (reply n gets seed ``seed + n - 1``)."""

    drafter: str
    num_speculative_tokens: int = 12
    adaptive_gamma: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    conversation: Conversation = field(init=False)

    def __post_init__(self) -> None:
        self.conversation = Conversation(seed=self.seed)

    @property
    def history(self) -> list[dict[str, str]]:
        """The kept turns (``[{"role", "content"}]``)."""
        return self.conversation.messages

    def settings(self) -> ReplySettings:
        return ReplySettings(self.drafter, self.num_speculative_tokens, self.adaptive_gamma, self.temperature,
                             self.top_p, self.max_new_tokens)

    def config(self) -> GenerationConfig:
        """The engine's settings the next reply gets."""
        return self.conversation.config(self.settings())

    def gamma_text(self) -> str:
        return f"adaptive γ up to {self.num_speculative_tokens}" if self.adaptive_gamma else \
            f"γ = {self.num_speculative_tokens} every round"


def run_command(line: str, state: ReplState, kinds: list[str], prepare: Callable[[str], object]) -> str | None:
    """Apply one ``/command`` line to ``state``; the text to show, or None for ``/quit``.
    ``prepare`` loads a drafter (``ChatService.prepare_drafter``); its errors are shown, not raised."""
    name, _, arg = line[1:].strip().partition(" ")
    arg = arg.strip()
    if name in ("quit", "exit", "q"):
        return None
    if name in ("help", "h", "?"):
        return HELP.format(kinds=", ".join(kinds), max_t=MAX_TEMPERATURE)
    if name == "clear":
        state.conversation.clear()
        return "the conversation is cleared"
    if name == "drafter":
        if not arg:
            return f"drafter: {state.drafter} (available: {', '.join(kinds)})"
        if arg not in kinds:
            return f"no drafter {arg!r} here; available: {', '.join(kinds)}"
        try:
            prepare(arg)  # the first time a model drafter loads it (seconds; the loading stages are printed)
        except Exception as exc:  # a drafter that does not load: keep the one we have
            return f"drafter {arg!r} could not be loaded ({exc}); still {state.drafter}"
        state.drafter = arg
        return f"drafter: {arg}"
    if name == "gamma":
        if not arg:
            return state.gamma_text()
        if arg == "auto":
            state.num_speculative_tokens, state.adaptive_gamma = 12, True
            return state.gamma_text()
        try:
            value = int(arg)
        except ValueError:
            value = 0
        if not 1 <= value <= MAX_NUM_SPECULATIVE_TOKENS:
            return f"γ must be 1..{MAX_NUM_SPECULATIVE_TOKENS} or auto, not {arg!r}"
        state.num_speculative_tokens, state.adaptive_gamma = value, False
        return state.gamma_text()
    if name in ("temperature", "temp", "t"):
        if not arg:
            return f"temperature {state.temperature:g}"
        try:
            temperature = float(arg)
        except ValueError:
            temperature = -1.0
        if not 0.0 <= temperature <= MAX_TEMPERATURE:
            return f"temperature must be 0..{MAX_TEMPERATURE}, not {arg!r}"
        state.temperature = temperature
        return f"temperature {temperature:g}"
    return f"unknown command /{name}; /help lists them"


def reply(service, state: ReplState, message: str, console, err_console) -> DoneEvent | None:
    """Stream one reply to ``console`` (rich), its notices and summary to ``err_console``; the
    conversation keeps the turn (by its rule: a reply stopped before its first token is not kept)."""
    from rich.text import Text

    from specchat.commands.generate import summary_line
    from specchat.service import Notice

    metrics = SpeculationMetrics()
    reading = False
    with StopOnCtrlC() as stop, keys_not_echoed():
        for event in state.conversation.stream(service.stream_chat, message, state.settings(), cancel=stop.cancel,
                                               prefill_progress=True):
            if isinstance(event, Notice):
                err_console.print(Text(f"note: {event.text}", style="yellow" if event.warning else "dim"))
                continue
            if isinstance(event, PrefillEvent):  # said once, for a prompt that takes a second or more to read
                if not reading and event.remaining_ms is not None and event.remaining_ms >= 1000:
                    reading = True
                    err_console.print(Text(f"reading {event.num_total - event.num_done:,} new tokens of the prompt, "
                                           f"about {event.remaining_ms / 1000:.0f} s (Ctrl-C stops)", style="dim"))
                continue
            metrics.update(event)
            if isinstance(event, TokenEvent):
                console.print(Text(event.text, style=STYLES[event.kind.value]), end="", soft_wrap=True)
    done = metrics.done
    if not isinstance(done, DoneEvent):
        return None
    console.print(Text(done.final_text), soft_wrap=True)  # and the reply's line ends: notes start their own
    if done.stop_reason is StopReason.CANCELLED:
        what = "stopped" + (" while reading your message" if not done.token_ids and reading else "")
        err_console.print(Text(f"({what})", style="yellow"))
    err_console.print(Text(summary_line(state.drafter, metrics, done), style="dim"))
    return done


def _prepare(service, kind: str) -> None:
    """Load drafter ``kind`` (once), printing the loading stages as the CLI's start does, with
    the seconds since the command that asked for it."""
    from specchat.progress import BOARD

    with BOARD.echoing(sys.stderr, from_now=True):
        service.prepare_drafter(kind)


def run_repl(service, state: ReplState, *, read: Callable[[str], str] = input, console=None, err_console=None) -> int:
    """Read messages and commands until ``/quit`` or end of input; 0."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console(highlight=False, soft_wrap=True)
    err_console = err_console or Console(stderr=True, highlight=False, soft_wrap=True)
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401 (line editing and history for input())
        except ImportError:
            pass
    if interactive:  # the legend and the keys, for a person at a terminal
        legend = Text("colours: ")
        for kind, style in STYLES.items():
            legend.append(kind, style=style)
            legend.append(" ")
        err_console.print(legend)
        err_console.print(Text(f"{state.gamma_text()}; /help for commands; Ctrl-C stops a reply, Ctrl-D leaves",
                               style="dim"))
    kinds = list(service.drafter_kinds())
    while True:
        try:
            line = read("> " if interactive else "")
        except EOFError:
            if interactive:
                err_console.print()
            return 0
        except KeyboardInterrupt:  # at the prompt: a new line, as a shell does
            err_console.print(Text("\n(Ctrl-D or /quit leaves)", style="dim"))
            continue
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            said = run_command(line, state, kinds, lambda kind: _prepare(service, kind))
            if said is None:
                return 0
            err_console.print(Text(said, style="cyan"))
            continue
        try:
            reply(service, state, line, console, err_console)
        except ValueError as exc:  # e.g. a message longer than the context window
            err_console.print(Text(f"error: {exc}", style="red"))
