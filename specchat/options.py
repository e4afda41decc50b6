"""Command-line options shared by the app (``python app.py``, ``specchat app``) and the
``specchat`` commands: the argument types with their one-line errors, the app's options, and
``--models`` / ``--allow-download``. Below both the app and the CLI (neither imports the other
for its options). Importing it imports neither gradio nor torch, so ``--help`` is quick."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from specchat.drafters.kinds import KIND_NAMES
from specchat.offline import ALLOW_DOWNLOAD_ENV, allow_hub

PROG = "specchat" if Path(sys.argv[0]).name == "specchat" else "python -m specchat"  # as the user ran it
# The same names as specchat.runtimes.registry's and specchat.runtimes.loading's (tests/test_package.py checks),
# repeated so that building the parser imports neither pydantic and yaml nor torch.
MODELS_YAML_ENV = "SPECCHAT_MODELS_YAML"
DTYPE_CHOICES = ("auto", "float32", "bfloat16")
RUNTIME_CHOICES = ("auto", "transformers", "llamacpp")  # specchat.runtimes.select.RUNTIME_NAMES (a test checks)
RUNTIME_HELP = ("what runs the target and the model drafters: llamacpp (the GGUF as it is, on llama.cpp: the prebuilt "
                "xllamacpp library that requirements.txt installs, or llama-cpp-python when it is installed), "
                "transformers (PyTorch; a GGUF is converted to bf16 once), or auto (default: the runtime measured faster "
                "on this machine by `specchat calibrate --runtimes` when on record, else llama.cpp for a model with a "
                "GGUF on the CPU (or on a GPU when the llama.cpp build offloads to it), else transformers)")

class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits with status 2."""

    def error(self, message: str) -> NoReturn:  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")


def device(text: str) -> str | None:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps``, …), or ``auto``
    (None: CUDA when present, else the CPU); else an argparse error naming what is available (a
    bad name was a traceback)."""
    if text == "auto":
        return None
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (auto, cpu, cuda, cuda:0, …)") from None
    available = {"cpu": True, "cuda": torch.cuda.is_available(),
                 "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(device.type, False):
        have = ", ".join(k for k, ok in available.items() if ok)
        raise argparse.ArgumentTypeError(f"{text!r} is not available on this machine; available: auto, {have}")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


DEVICE_HELP = "auto (default: CUDA when present, else the CPU), cpu, cuda, cuda:N"


def ranged(kind, lo, hi, what: str, *, lo_open: bool = False):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; allowed: {what}") from None
        if value != value or (value <= lo if lo_open else value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text} is out of range; allowed: {what}")
        return value

    return parse


def add_models_argument(parser: argparse.ArgumentParser) -> None:
    """``--models FILE`` (a user's registry file whose entries are added next to the shipped
    ones) and ``--allow-download`` (fetch a model that has only a Hub id)."""
    parser.add_argument("--models", metavar="FILE",
                        help=f"your own models file (the shipped models.yaml's format): its entries are added next to "
                             f"the shipped ones, and its default_target, if given, becomes the default (also: "
                             f"${MODELS_YAML_ENV})")
    parser.add_argument("--allow-download", action="store_true",
                        help=f"let specchat download a model that has a Hugging Face Hub id and no offline source (e.g. "
                             f"qwen2.5-coder-7b-instruct) into its cache; off by default, specchat then makes no network "
                             f"connections (also: ${ALLOW_DOWNLOAD_ENV}=1)")


def use_model_sources(args: argparse.Namespace) -> str | None:
    """Apply ``--allow-download`` and ``--models FILE`` for this process (see
    :func:`use_models_file`); an error message, or None."""
    if args.allow_download:
        allow_hub()
    return use_models_file(args.models)


def add_runtime_argument(parser: argparse.ArgumentParser, *, threads: bool = False) -> None:
    """``--runtime auto|transformers|llamacpp`` for the app and every model command, and with
    ``threads`` ``--threads N`` for llama.cpp (the app and the bench have their own, for torch too)."""
    parser.add_argument("--runtime", choices=RUNTIME_CHOICES, default="auto", help=RUNTIME_HELP)
    if threads:
        parser.add_argument("--threads", type=ranged(int, 1, 1024, "an integer >= 1"),
                            help="llama.cpp's CPU threads (default: every CPU this process may use)")


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    """The app's options, for ``python app.py`` and ``specchat app`` alike. Importing this
    module does not import gradio or torch, so ``--help`` is quick."""
    on_spaces = os.environ.get("SYSTEM") == "spaces"
    parser.add_argument(
        "--target", default=None,
        help="target model: a name from models.yaml, a local Hugging Face-format directory, or a .gguf file "
             "(runs on llama.cpp) (default: the project's default target)",
    )
    add_runtime_argument(parser)
    parser.add_argument(
        "--drafter", choices=KIND_NAMES, default=None,
        help="drafter selected at start (default: picked by measurement: the first start times each model "
             "drafter against the target on this machine, about two minutes, and keeps the result; "
             "see `specchat calibrate`)",
    )
    parser.add_argument(
        "--host", default=os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_spaces else "127.0.0.1"),
        help="address to listen on (default: $GRADIO_SERVER_NAME, else 0.0.0.0 on a Hugging Face Space "
             "(SYSTEM=spaces), else 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--port", type=ranged(int, 1, 65535, "1..65535"), default=_env_port(),
        help="port to listen on (default: $GRADIO_SERVER_PORT, else 7860)",
    )
    parser.add_argument(
        "--dtype", choices=DTYPE_CHOICES, default="auto",
        help="weights dtype for the target and model drafters (default auto: bf16 on a CPU and on a GPU that "
             "has it, else fp16)",
    )
    parser.add_argument("--device", type=device, default=None, help=DEVICE_HELP)
    parser.add_argument(
        "--trace", nargs="+", metavar="FILE", default=(),
        help="open recorded trace files (from `specchat generate --trace` or the page's download "
             "button) without loading any model",
    )
    parser.add_argument(
        "--threads", type=ranged(int, 1, 1024, "an integer >= 1"), default=None,
        help="CPU threads for torch and llama.cpp (default: torch's, one per core; llama.cpp: every CPU); on a "
             "machine busy with other work, fewer threads than cores can be much faster",
    )
    parser.add_argument(
        "--compile", action="store_true",
        help="compile the target's decode and verify passes (torch.compile over a static cache) in the "
             "background once the chat is ready (a few minutes on 2 CPU cores, several GB more memory); "
             "replies meanwhile run eagerly, later ones faster",
    )
    add_models_argument(parser)


def _env_port() -> str:
    """$GRADIO_SERVER_PORT if set, else "7860", as text: argparse parses a string default like a
    typed value, so a bad $GRADIO_SERVER_PORT is reported like a bad --port."""
    return os.environ.get("GRADIO_SERVER_PORT") or "7860"


def use_models_file(path: str | None) -> str | None:
    """``--models FILE``: check the file (with the shipped entries) and make every later
    :func:`specchat.runtimes.registry.load_registry` in this process read it. Returns an error message,
    or None when it is fine (or not given)."""
    if not path:
        return None
    from specchat.errors import RegistryError
    from specchat.runtimes.registry import load_registry

    try:
        load_registry(user=path)
    except RegistryError as exc:
        return str(exc)
    os.environ[MODELS_YAML_ENV] = str(Path(path).expanduser().resolve())
    return None


def auto_or(parse, word: str = "auto"):
    """An argparse type: the word 'auto' (or ``word``), or what ``parse`` accepts."""
    return lambda text: text if text == word else parse(text)
