"""specchat: a local Gradio chat that shows speculative decoding at work.

    python app.py [--target NAME_OR_PATH] [--drafter KIND] [--host 127.0.0.1] [--port 7860]
                  [--dtype auto|float32|bfloat16] [--device auto|cpu|cuda] [--threads N] [--compile]
                  [--models FILE]
    specchat app [the same options]       (installed with `pip install .`)

Start-up only: the options, the checks that must come before minutes of loading (a taken port,
a non-loopback address), the models loading in the background, and the page launched. The page
is :mod:`specchat.ui.page.layout` (components), :mod:`specchat.ui.page.handlers` (what each event does) and
:mod:`specchat.ui.page.wiring` (the events wired to them, :func:`build_ui`), a browser session's behaviour is
:class:`specchat.ui.session.chat.ChatSession`, and the one loaded service with its loading banners
and ZeroGPU streaming is :mod:`specchat.ui.page.host`; their public names are importable from here.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import threading

from specchat.options import Parser, add_app_arguments, use_model_sources
from specchat.service_api import ChatServiceProtocol
from specchat.ui.html.render import CSS
from specchat.ui.page.host import ON_SPACES, TraceOnlyService, compile_note, get_service, loading_html  # noqa: F401 (the app's names)
from specchat.ui.page.layout import CLICK_JS
from specchat.ui.page.live import app_kwargs as live_app_kwargs
from specchat.ui.page.wiring import DRAFTER_CHOICES, build_ui  # noqa: F401 (the app's names)


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
    """``python app.py`` / ``specchat app`` options (:func:`specchat.options.add_app_arguments`)."""
    parser = Parser(prog="app.py", description="specchat: a local chat that shows speculative decoding at work.")
    add_app_arguments(parser)
    return parser.parse_args(argv)


def port_in_use(host: str, port: int) -> OSError | None:
    """The error binding ``host:port`` gives right now (None when it is free): checked before
    the models start loading, so that a taken port is a one-line error, not a traceback after
    minutes of loading."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def _is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) or any(c.__name__ == "SpecchatError" for c in type(exc).__mro__)


def _announce_ready(service: ChatServiceProtocol, drafter: str, url: str) -> None:
    """Say in the terminal when the background loading has finished (with the page's address:
    Gradio's own line is often overwritten by the progress bars), or why it failed."""
    service.ready.wait()
    if service.startup_error is not None:
        print(
            f"error: loading the models failed: {service.startup_error}\n"
            "The page shows the same message. Fix the cause and restart the app.",
            file=sys.stderr,
        )
    else:
        picked = service.picked
        label = f"'{picked.drafter}' ({picked.why})" if drafter == "auto" and picked else f"'{drafter}'"
        from specchat.progress import BOARD

        BOARD.echo_to(None)
        print(f"Ready: {service.target_name} with drafter {label}. Open {url}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """``python app.py …``: parse the options and :func:`run`; the exit status."""
    args = parse_args(argv)
    problem = use_model_sources(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Serve the chat with parsed options (``python app.py`` and ``specchat app``); blocks until
    the server stops. Returns 2 on a user error (message on stderr), else 0."""
    if not is_loopback(args.host) and not ON_SPACES:
        print(
            f"WARNING: listening on {args.host}: the chat (and the models' compute) becomes "
            "reachable from the network. Use --host 127.0.0.1 to keep it on this machine.",
            file=sys.stderr,
        )
    busy = port_in_use(args.host, args.port)
    if busy is not None:
        print(
            f"error: cannot listen on {args.host}:{args.port} ({busy.strerror or busy}): is another "
            "app using it? Pick another port with --port, e.g. --port 7861.",
            file=sys.stderr,
        )
        return 2
    if args.trace:
        return serve_traces(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        service = get_service(target=args.target, dtype=args.dtype, device=args.device, compile=args.compile,
                              runtime=args.runtime, threads=args.threads)
        kinds = list(service.drafter_kinds())
        if args.drafter is not None and args.drafter not in kinds:
            raise ValueError(
                f"drafter '{args.drafter}' is not available for {service.target_name}; "
                f"available: {', '.join(kinds)}"
            )
        drafter = args.drafter or "auto"
    except Exception as exc:
        if _is_user_error(exc):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    # Load in the background: the page opens at once and shows the same progress as the
    # terminal (the first start converts the models, later starts load from the cache).
    print(
        f"Loading {service.target_name} with drafter '{drafter}' (progress below and in the browser)…"
        if drafter != "auto" else
        f"Loading {service.target_name}; the drafter is picked by measurement on this machine (--drafter to choose "
        "one) (progress below and in the browser)…",
        file=sys.stderr,
    )
    from specchat.progress import BOARD

    BOARD.echo_to(sys.stderr)  # each stage the page shows, in the terminal too, with the seconds since the start
    service.start(drafter)
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else host}:{args.port}"
    threading.Thread(target=_announce_ready, args=(service, drafter, url), daemon=True).start()
    demo = build_ui(service, default_drafter=drafter)
    demo.queue(default_concurrency_limit=1)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=False,
        ssr_mode=False,
        css=CSS,
        head=CLICK_JS,
        run_history=False,
        app_kwargs=live_app_kwargs(),
    )
    return 0


def serve_traces(args: argparse.Namespace) -> int:
    """``--trace FILE…``: the page with the recorded replies and no model."""
    from specchat.analysis.trace import TraceError, read_trace

    targets = []
    for path in args.trace:
        try:
            targets.append(str(read_trace(path).header.get("target", "?")))
        except (TraceError, OSError, UnicodeDecodeError) as exc:
            print(f"error: cannot open the trace {path}: {exc}", file=sys.stderr)
            return 2
    service = TraceOnlyService(", ".join(dict.fromkeys(targets)))
    demo = build_ui(service, default_drafter="none", trace_files=tuple(args.trace))
    demo.queue(default_concurrency_limit=1)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Showing {len(args.trace)} trace file(s), no model loaded. Open http://{host}:{args.port}", file=sys.stderr)
    demo.launch(server_name=args.host, server_port=args.port, share=False, ssr_mode=False,
                css=CSS, head=CLICK_JS, run_history=False, app_kwargs=live_app_kwargs())
    return 0


if __name__ == "__main__":
    sys.exit(main())
