"""What the subcommands share: the ChatService loaded from their arguments (``--target``,
``--drafter``, ``--dtype``, ``--device``, ``--drafter-model``, ``--runtime``), the ``--compile``
option, the terminal's token colours and :func:`fail`, the one way a command reports an error.
Heavy imports (torch, transformers through the service) stay inside the functions: ``specchat
--help`` imports neither torch nor gradio."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from specchat.commands import ctrl_c
from specchat.options import PROG

if TYPE_CHECKING:
    from specchat.service import ChatService

TOKEN_STYLES = {"accepted": "#2f9e44", "resampled": "#e8590c", "bonus": "#9775fa", "target": ""}
"""The colour (a rich style) of each token kind in a terminal: the page's legend colours
(``specchat.ui.html.render.KIND_COLORS``: green accepted, orange resampled, purple bonus; repeated here
so that the command line does not import the page's renderer, a test checks they agree), except the
bonus purple, a lighter shade of the page's #7048e8: on a black terminal that one (and the
256-colour blue it becomes, #5f5fd7) reads at a contrast of 3.8-4.1, #9775fa (256 colours:
#8787ff) at 6.2-6.9, the green's level, and still 3.0-3.4 on white, the other two's. A target token is
plain, as on the page. ``generate`` and ``chat`` both draw with it. A terminal without true colour
shows the nearest colour it has."""


def fail(message: str, code: int = 2, *, command: str | None = None) -> int:
    """Print ``PROG: error: message`` (``PROG COMMAND: error: …`` with ``command``) on stderr and
    return ``code``, the exit status: 2 for a bad argument or input (argparse's), 1 for a run that
    failed. Every command reports its errors through this one line."""
    print(f"{PROG}{' ' + command if command else ''}: error: {message}", file=sys.stderr)
    return code


def add_compile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile", action="store_true",
                        help="compile the target's decode and verify passes (torch.compile with freezing over a static "
                             "cache; one graph, a few minutes on 2 CPU cores, several GB more memory) before generating; "
                             "target-only runs compiled too")


def compile_target(service: ChatService) -> None:
    """--compile: build the compiled target's graphs, with progress on stderr."""
    compiled = service.compile_target(lambda text: print(text + " …", file=sys.stderr, flush=True))
    print(f"compiled the target in {sum(compiled.compile_s.values()):.0f} s "
          f"(pass lengths {', '.join(map(str, compiled.buckets))})", file=sys.stderr, flush=True)


def add_speculation_arguments(parser: argparse.ArgumentParser) -> None:
    """--drafter (default ``auto``: the measured pick, as in the app), -k / --num-speculative-tokens
    (default 12, the most per round) and --fixed-gamma (the default is adaptive γ, as in the app)."""
    from specchat.core.config import MAX_NUM_SPECULATIVE_TOKENS
    from specchat.drafters.kinds import KIND_NAMES
    from specchat.options import ranged

    parser.add_argument("--drafter", choices=("auto", *KIND_NAMES), default="auto",
                        help="how drafts are made (default auto: the one measured fastest on this machine, as the app "
                             "picks it; the first run times them, then the pick is kept)")
    parser.add_argument("--num-speculative-tokens", "-k", default=12,
                        type=ranged(int, 1, MAX_NUM_SPECULATIVE_TOKENS, f"1..{MAX_NUM_SPECULATIVE_TOKENS}"),
                        help="γ: the most draft tokens per round (default 12, as in the app); with --fixed-gamma exactly "
                             "this many")
    parser.add_argument("--fixed-gamma", action="store_true",
                        help="draft exactly -k tokens every round; by default γ is chosen each round (up to -k) to maximise "
                             "the predicted speedup and drafting pauses when it cannot pay, as in the app. Adaptive γ "
                             "depends on measured timings, so with temperature > 0 a --seed fixes the reply only with "
                             "--fixed-gamma (the distribution is the same either way)")
    parser.add_argument("--adaptive-gamma", action="store_true", help=argparse.SUPPRESS)  # the default now


def load_service(args: argparse.Namespace) -> tuple[ChatService | None, int]:
    """A loaded ChatService with the drafter ready, or an exit status for a bad argument.
    ``args.drafter == "auto"`` becomes the measured pick (:meth:`ChatService.pick_drafter`,
    said on stderr). Each loading stage is printed on stderr as it starts."""
    from specchat.errors import RegistryError
    from specchat.progress import BOARD
    from specchat.service import ChatService

    try:
        service = ChatService(target=args.target, dtype=args.dtype, device=args.device, drafter_model=args.drafter_model,
                              runtime=args.runtime, threads=getattr(args, "threads", None))
    except (RegistryError, ValueError) as exc:  # an unknown --target or a runtime it cannot run on, before any loading
        return None, fail(str(exc))
    if args.drafter != "auto" and args.drafter not in service.drafter_kinds():
        return None, fail(f"drafter {args.drafter!r} is not available for {service.target_name}; "
                          f"allowed: auto, {', '.join(service.drafter_kinds())}")
    with BOARD.echoing(sys.stderr):
        service.load()
        if args.drafter == "auto":
            args.drafter, why = service.pick_drafter()
            print(f"drafter: {args.drafter} ({why})", file=sys.stderr, flush=True)
        note = drafter_cost_note(service, args.drafter)
        if note:
            print(f"note: {note}", file=sys.stderr, flush=True)
        service.prepare_drafter(args.drafter)
        if service.runtime == "transformers":  # PyTorch's first passes in a process are several times slower
            BOARD.stage("Warming up (the first forward passes of a process are slow)")
            service.warm_up(args.drafter, num_tokens=4)
            service.forget_prefix()  # the first prompt is read whole, as without the warm-up
    if getattr(args, "compile", False):
        compile_target(service)
    ctrl_c.end_of_start()  # a Ctrl-C a library swallowed while starting still ends the command
    return service, 0


def drafter_cost_note(service: ChatService, drafter: str) -> str | None:
    """What ``drafter`` costs here when this machine's calibration on record timed it and its step
    costs at least a target step (it then cannot pay: S(γ) > 1 needs α > c), else None."""
    from specchat.analysis import calibrate

    record = service.calibration
    if record is None:
        try:
            record = calibrate.load(calibrate.calibration_key(service))
        except (OSError, ValueError):
            record = None
    label = calibrate.menu_label(drafter, record)
    return f"{label} (calibrated {record.measured_at[:10]})" if record is not None and "cannot pay" in label else None


class StopOnCtrlC:
    """While inside: Ctrl-C sets :attr:`cancel` (the engine ends the reply at its next round, or
    between prefill passes) instead of raising; a second Ctrl-C raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None  # the SIGINT handler to put back

    def _handle(self, signum, frame) -> None:
        if self.cancel.is_set():
            raise KeyboardInterrupt
        self.cancel.set()

    def __enter__(self) -> StopOnCtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@contextmanager
def keys_not_echoed(stream=None) -> Iterator[None]:
    """While inside, a terminal on ``stream`` (stdin) does not echo what is typed: a reply is being
    written on it, and the "^C" the terminal draws for Ctrl-C (or any key pressed meanwhile)
    landed inside the reply's text. The keys still work (Ctrl-C stops the reply; typed text waits
    for the next prompt). Nothing happens when ``stream`` is not a terminal."""
    try:
        import termios
    except ImportError:  # Windows
        yield
        return
    stream = stream or sys.stdin
    try:
        fd = stream.fileno()
        saved = termios.tcgetattr(fd) if stream.isatty() else None
    except (OSError, ValueError, AttributeError, termios.error):  # no real stdin (a test's, a closed one)
        saved = None
    if saved is None:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
