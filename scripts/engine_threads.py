"""The engine's decode rate in the main thread against the same reply through the app's ChatSession
(the engine in a thread of its own, as on the page), no browser: what threads alone cost.

    python scripts/engine_threads.py [--rounds 3] [--drafter none] [--max-new-tokens 256] [--message TEXT]

Loads the default target (models.yaml) on llama.cpp, then alternates the two ways, ``--rounds``
times each, and prints per reply the decode rate (the DoneEvent's tokens ÷ decode time) and the
process's voluntary context switches (``getrusage``): many thousands a reply mean threads that
sleep at OpenMP barriers (``specchat/runtimes/compute_thread.py``). Medians at the end. Greedy.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specchat.conversation import ReplySettings, generation_config  # noqa: E402
from specchat.core.events import DoneEvent  # noqa: E402
from specchat.service import ChatService  # noqa: E402
from specchat.ui.session.chat import ChatSession  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drafter", default="none")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--message", default="Count from 1 to 1000, separated by spaces.")
    args = parser.parse_args()
    service = ChatService(runtime="llamacpp")
    service.load()
    service.prepare_drafter(args.drafter)
    settings = ReplySettings(args.drafter, 4, True, 0.0, 1.0, args.max_new_tokens)

    def main_thread() -> DoneEvent:
        done = None
        for event in service.stream_chat([], args.message, drafter=args.drafter,
                                         config=generation_config(settings, 0, trace=True), prefill_progress=True):
            done = event if isinstance(event, DoneEvent) else done
        assert done is not None
        return done

    def session() -> DoneEvent:
        chat = ChatSession(service)
        for _ in chat.respond(args.message, settings):
            pass
        done = chat.views.replies[-1].metrics.done
        assert done is not None
        return done

    rates: dict[str, list[float]] = {"main thread": [], "ChatSession": []}
    for i in range(args.rounds):
        for name, reply in (("main thread", main_thread), ("ChatSession", session)):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
            done = reply()
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
            rate = len(done.token_ids) / (done.decode_ms / 1000)
            rates[name].append(rate)
            print(f"round {i + 1} {name:12s} {len(done.token_ids)} tokens, decode {rate:5.1f} tok/s, "
                  f"{switches:,} voluntary context switches", flush=True)
    for name, values in rates.items():
        print(f"median {name:12s} {statistics.median(values):5.1f} tok/s")
    main_rate, session_rate = (statistics.median(v) for v in rates.values())
    print(f"ChatSession ÷ main thread: {session_rate / main_rate:.2f}")


if __name__ == "__main__":
    main()
