"""What the model subcommands (generate, chat, calibrate, audit, bench) share: the ChatService
loaded from their arguments (``--target``, ``--drafter``, ``--dtype``, ``--device``,
``--drafter-model``, ``--runtime``) and the ``--compile`` option. Heavy imports (torch, transformers through
the service) stay inside the functions: ``specchat --help`` imports neither torch nor gradio."""

from __future__ import annotations

import argparse
import sys

from specchat.options import PROG


def add_compile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile", action="store_true",
                        help="compile the target's decode and verify passes (torch.compile with freezing over a static "
                             "cache; one graph, a few minutes on 2 CPU cores, several GB more memory) before generating; "
                             "target-only runs compiled too")


def compile_target(service) -> None:
    """--compile: build the compiled target's graphs, with progress on stderr."""
    compiled = service.compile_target(lambda text: print(text + " …", file=sys.stderr, flush=True))
    print(f"compiled the target in {sum(compiled.compile_s.values()):.0f} s "
          f"(pass lengths {', '.join(map(str, compiled.buckets))})", file=sys.stderr, flush=True)


def load_service(args: argparse.Namespace):
    """A loaded ChatService with the drafter ready, or an exit status for a bad argument."""
    from specchat.errors import RegistryError
    from specchat.service import ChatService

    try:
        service = ChatService(target=args.target, dtype=args.dtype, device=args.device, drafter_model=args.drafter_model,
                              runtime=args.runtime, threads=getattr(args, "threads", None))
    except (RegistryError, ValueError) as exc:  # an unknown --target or a runtime it cannot run on, before any loading
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return None, 2
    if args.drafter not in service.drafter_kinds():
        print(
            f"{PROG}: error: drafter {args.drafter!r} is not available for {service.target_name}; "
            f"allowed: {', '.join(service.drafter_kinds())}",
            file=sys.stderr,
        )
        return None, 2
    service.load()
    service.prepare_drafter(args.drafter)
    if getattr(args, "compile", False):
        compile_target(service)
    return service, 0


