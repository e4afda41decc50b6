"""Command line: ``specchat COMMAND …`` / ``python -m specchat COMMAND …``.

This module owns the parser's top level and the dispatch: each subcommand lives in a module
of its own with an ``add_parser(subparsers)`` and a ``run(args)``: :mod:`~specchat.commands.generate`
(headless, JSON lines with --json), :mod:`~specchat.commands.chat`, :mod:`~specchat.commands.calibrate`,
:mod:`~specchat.commands.audit`, and the measurements in :mod:`specchat.commands.bench` (``bench``:
:mod:`~specchat.commands.bench.cli`, ``bench-page``: :mod:`~specchat.commands.bench.page`, ``soak``:
:mod:`~specchat.commands.bench.soak_cli`); ``app`` is the app's
(:func:`specchat.ui.page.app.run`). None of them imports torch or gradio before it runs, so
``specchat --help`` stays light.
"""

from __future__ import annotations

import argparse
import sys

from specchat.commands import audit, calibrate, chat, ctrl_c, generate
from specchat.commands.bench import cli as bench_cli
from specchat.commands.bench import page as bench_page
from specchat.commands.bench import soak_cli
from specchat.commands.common import fail
from specchat.options import PROG, Parser, add_app_arguments, use_model_sources

_COMMANDS = {"generate": generate, "chat": chat, "calibrate": calibrate, "audit": audit, "bench": bench_cli,
             "bench-page": bench_page, "soak": soak_cli}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="specchat: speculative decoding you can see.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in _COMMANDS.values():
        command.add_parser(sub)
    app = sub.add_parser("app", help="open the chat in the browser (the same as `python app.py`)",
                         description="specchat: a local chat that shows speculative decoding at work.")
    add_app_arguments(app)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``specchat COMMAND …`` / ``python -m specchat COMMAND …``; the exit status (130 after a
    Ctrl-C that a command did not take as "stop this reply": while loading, or a second one;
    ``specchat.__main__.run`` then ends the process by SIGINT, which a shell shows as 130)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception:
        if not ctrl_c.came_while_starting():
            raise
        # a library swallowed the Ctrl-C and failed later because of it (ctrl_c's docstring)
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    problem = use_model_sources(args)
    if problem is not None:
        return fail(problem, command=args.command)
    if args.command == "app":
        from specchat.ui.page.app import run

        return run(args)
    if args.command == "bench":
        return bench_cli.run(args, sys.argv[1:] if argv is None else argv)
    if args.command in _COMMANDS:
        return _COMMANDS[args.command].run(args)
    return 2
