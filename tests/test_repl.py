"""``specchat chat`` without --script: the terminal chat (specchat/commands/repl.py).

The commands change what the next reply runs with; a reply streams the target's own greedy text
(compared with target-only generation, not with the chat's own output); Ctrl-C (SIGINT) stops a
reply through the engine's cancel and keeps the program and the conversation; in a real
terminal (a pty) the tokens are coloured, and with a pipe the output is plain text.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import termios
import time

import pytest

from specchat.commands import cli, ctrl_c
from specchat.commands.common import keys_not_echoed
from specchat.commands.repl import HELP, ReplState, reply, run_command, run_repl
from specchat.core.config import GenerationConfig
from specchat.core.events import DoneEvent, StopReason

KINDS = ["none", "ngram", "sibling", "hybrid"]


def test_the_commands_change_what_the_next_reply_runs_with():
    state = ReplState(drafter="ngram")
    prepared = []
    assert state.config().adaptive_gamma and state.config().num_speculative_tokens == 12
    assert run_command("/gamma 3", state, KINDS, prepared.append) == "γ = 3 every round"
    assert (state.config().num_speculative_tokens, state.config().adaptive_gamma) == (3, False)
    assert run_command("/gamma auto", state, KINDS, prepared.append) == "adaptive γ up to 12"
    assert state.adaptive_gamma and state.num_speculative_tokens == 12
    assert "1..16" in run_command("/gamma 17", state, KINDS, prepared.append)
    assert "1..16" in run_command("/gamma x", state, KINDS, prepared.append) and state.num_speculative_tokens == 12
    assert run_command("/drafter sibling", state, KINDS, prepared.append) == "drafter: sibling"
    assert state.drafter == "sibling" and prepared == ["sibling"]
    assert "available: none, ngram, sibling, hybrid" in run_command("/drafter int4", state, KINDS, prepared.append)
    assert state.drafter == "sibling"
    assert run_command("/temperature 0.7", state, KINDS, prepared.append) == "temperature 0.7"
    assert state.config().temperature == 0.7
    assert "0..2.0" in run_command("/temperature 3", state, KINDS, prepared.append) and state.temperature == 0.7
    assert state.config().seed == 0  # reply 1 of the conversation: the seed itself
    state.conversation.finish(state.conversation.begin("a", state.settings()))  # reply 1 asked (not kept: no token)
    state.history.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert state.config().seed == 1  # reply 2: seed + 1, as --script does
    assert run_command("/clear", state, KINDS, prepared.append) == "the conversation is cleared" and not state.history
    assert run_command("/help", state, KINDS, prepared.append).startswith("commands:")
    assert run_command("/quit", state, KINDS, prepared.append) is None
    assert "unknown command /nope" in run_command("/nope", state, KINDS, prepared.append)


def test_a_drafter_that_does_not_load_keeps_the_one_there_was():
    state = ReplState(drafter="ngram")

    def fails(kind):
        raise RuntimeError("out of memory")

    said = run_command("/drafter sibling", state, KINDS, fails)
    assert "could not be loaded (out of memory); still ngram" in said and state.drafter == "ngram"


def consoles():
    from rich.console import Console

    out, err = io.StringIO(), io.StringIO()
    return out, err, Console(file=out, highlight=False, soft_wrap=True), Console(file=err, highlight=False, soft_wrap=True)


def target_only(service, history, message, n):
    """The target's own greedy reply, generated without a drafter."""
    events = list(service.stream_chat(history, message, drafter="none", config=GenerationConfig(max_new_tokens=n)))
    return next(e for e in events if isinstance(e, DoneEvent)).text


def test_replies_are_the_targets_and_the_conversation_is_kept(smollm2_service):
    state = ReplState(drafter="ngram", max_new_tokens=24)
    out, err, console, err_console = consoles()
    first = reply(smollm2_service, state, "Name three colours.", console, err_console)
    assert out.getvalue() == first.text + "\n" == target_only(smollm2_service, [], "Name three colours.", 24) + "\n"
    assert state.history == [{"role": "user", "content": "Name three colours."},
                             {"role": "assistant", "content": first.text}]
    second = reply(smollm2_service, state, "And three animals?", console, err_console)
    assert second.text == target_only(smollm2_service, state.history[:2], "And three animals?", 24)
    assert second.num_prefilled < second.num_prompt_tokens - 10  # the first turn was kept in the cache
    assert len(state.history) == 4 and err.getvalue().count("[ngram] ") == 2  # a summary line per reply


def test_ctrl_c_stops_the_reply_and_keeps_the_conversation(smollm2_service):
    """SIGINT during a reply (sent by the console as the 3rd token is written) ends it at the
    next round with stop reason 'cancelled'; what was written is kept; the next message runs."""
    state = ReplState(drafter="ngram", num_speculative_tokens=1, adaptive_gamma=False, max_new_tokens=64)
    before = signal.getsignal(signal.SIGINT)
    from rich.console import Console

    class CtrlCAtTheThirdWrite(io.StringIO):
        writes = 0

        def write(self, text):
            self.writes += 1
            if self.writes == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return super().write(text)

    err = io.StringIO()
    console, err_console = Console(file=CtrlCAtTheThirdWrite(), soft_wrap=True), Console(file=err, soft_wrap=True)
    done = reply(smollm2_service, state, "Write a long story about a cat.", console, err_console)
    assert done.stop_reason is StopReason.CANCELLED and 0 < len(done.token_ids) < 64
    assert "(stopped)" in err.getvalue()
    assert state.history[-1] == {"role": "assistant", "content": done.text}
    assert signal.getsignal(signal.SIGINT) is before  # outside a reply Ctrl-C does what it did before
    after = reply(smollm2_service, state, "Thanks.", consoles()[2], consoles()[3])
    assert after.stop_reason is not StopReason.CANCELLED and len(state.history) == 4


def test_piped_input_is_read_to_its_end_and_answered_in_plain_text(smollm2_service):
    state = ReplState(drafter="ngram", max_new_tokens=8)
    lines = iter(["/gamma 2", "Say hi.", "", "/quit", "never read"])
    out, err, console, err_console = consoles()
    assert run_repl(smollm2_service, state, read=lambda prompt: next(lines), console=console,
                    err_console=err_console) == 0
    assert next(lines) == "never read"
    assert "\x1b[" not in out.getvalue() and out.getvalue().strip()
    assert "γ = 2 every round" in err.getvalue() and state.history[0]["content"] == "Say hi."


SMALL = ["--target", "smollm2-135m-instruct", "--runtime", "llamacpp", "--threads", "1", "--drafter", "ngram"]


def _own_terminal() -> None:
    """In the child: a session of its own with the pty as its controlling terminal, so that the
    terminal's Ctrl-C reaches it as SIGINT, and SIGINT's default action, as a shell gives it (a
    test run in the background inherits SIGINT ignored, and Python then keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@contextlib.contextmanager
def in_a_terminal(args: list[str], tmp_path, stderr=None):
    """``python -m specchat ARGS`` in a pseudo-terminal of its own: (the process, the terminal's
    primary side to read and type on); killed and closed on the way out. The model cache is the
    one the smollm2_service fixture filled, so no assembly bar comes before the reply. ``stderr``:
    a file for the process's stderr instead of the terminal."""
    env = dict(os.environ, COLUMNS="200", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    primary, secondary = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "specchat", *args], stdin=secondary, stdout=secondary,
                               stderr=secondary if stderr is None else stderr, env=env, preexec_fn=_own_terminal)
    os.close(secondary)
    try:
        yield process, primary
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)


def _read_until(fd, pattern: str, timeout: float) -> str:
    seen, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            seen += chunk
            if re.search(pattern, seen.decode("utf-8", "replace")):
                return seen.decode("utf-8", "replace")
    raise AssertionError(f"no {pattern!r} within {timeout} s in:\n{seen.decode('utf-8', 'replace')[-2000:]}")


def _exit_status(process, fd, timeout: float) -> int:
    """The process's exit status, reading what it writes to the terminal meanwhile (a full
    terminal buffer would block it)."""
    end = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < end:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                os.read(fd, 4096)
            except OSError:
                break
    return process.wait(timeout=max(1.0, end - time.monotonic()))


@pytest.mark.subprocess
def test_in_a_terminal_tokens_are_coloured_and_ctrl_c_stops_only_the_reply(smollm2_service, tmp_path):
    """The program in a pseudo-terminal, as a person runs it: the legend and the tokens in colour;
    Ctrl-C while a reply streams stops it and the prompt comes back; a second message is answered;
    Ctrl-D leaves with status 0."""
    args = ["chat", "--target", "smollm2-135m-instruct", "--runtime", "llamacpp", "--threads", "1", "--drafter", "ngram",
            "--max-new-tokens", "400"]
    with in_a_terminal(args, tmp_path) as (process, primary):
        shown = _read_until(primary, r"\n> ", 120)
        # the page's legend colours (green, orange, purple), as rich gives them on a 256-colour terminal;
        # the bonus purple lighter than the page's (#9775fa → 105, #8787ff: its 62, #5f5fd7, read poorly on black)
        assert "\x1b[38;5;35maccepted" in shown and "\x1b[38;5;166mresampled" in shown and "\x1b[38;5;105mbonus" in shown
        os.write(primary, b"Write a very long story about a lighthouse keeper.\r")
        _read_until(primary, r"lighthouse keeper\.\r?\n.{20,}", 60)  # tokens streaming
        os.write(primary, b"\x03")  # Ctrl-C, through the terminal's line discipline
        shown = _read_until(primary, r"\(stopped\)[\s\S]*stop=cancelled[\s\S]*> ", 60)
        # the terminal does not echo "^C" into the reply's text, and the note starts a line of its own
        assert "^C" not in shown and re.search(r"\n(\x1b\[[0-9;]*m)*\(stopped\)", shown), shown[-400:]
        os.write(primary, b"/drafter none\rSay yes.\r")
        shown = _read_until(primary, r"\[none\] [\s\S]*> ", 60)
        assert process.poll() is None
        os.write(primary, b"\x04")  # Ctrl-D
        assert process.wait(timeout=30) == 0


def test_while_a_reply_is_written_the_terminal_echoes_no_key():
    """The terminal drew Ctrl-C as "^C" where the cursor was, inside the reply's text (and would
    any key typed meanwhile): while a reply is written the terminal echoes nothing, and echoes
    again after it, even when the reply ends in an exception."""
    primary, secondary = pty.openpty()
    try:
        with os.fdopen(os.dup(secondary), "r") as stream:
            def echoed(keys: bytes) -> bytes:
                os.write(primary, keys)
                out = b""
                while select.select([primary], [], [], 0.3)[0]:
                    out += os.read(primary, 1024)
                return out

            assert echoed(b"a") == b"a"  # a terminal echoes what is typed
            with keys_not_echoed(stream):
                assert echoed(b"typed during the reply") == b""
            assert echoed(b"b") == b"b"
            with pytest.raises(KeyboardInterrupt), keys_not_echoed(stream):  # a second Ctrl-C ends the program
                raise KeyboardInterrupt
            assert termios.tcgetattr(secondary)[3] & termios.ECHO
        with keys_not_echoed(io.StringIO()):  # not a terminal: nothing to do
            pass
    finally:
        os.close(primary), os.close(secondary)


def test_the_help_names_every_command():
    for command in ("/drafter", "/gamma", "/temperature", "/clear", "/help", "/quit"):
        assert command in HELP


@pytest.mark.subprocess
def test_ctrl_c_in_generate_stops_the_reply_with_its_summary(smollm2_service, tmp_path):
    """The reply streams to the terminal (stderr, with the loading stages, a warning the CPU may
    earn, and the summary, goes to a file): once 300 characters of it have come, Ctrl-C stops it
    at the next round, the summary and the ledger follow, and the status is 0."""
    long_story = ["--prompt", "Write a very long story about a lighthouse keeper.", "--max-new-tokens", "2000"]
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as stderr, in_a_terminal(["generate", *SMALL, *long_story], tmp_path, stderr) as (process, primary):
        _read_until(primary, r"[\s\S]{300}", 120)  # only the reply writes to the terminal
        os.write(primary, b"\x03")
        assert _exit_status(process, primary, 60) == 0
        shown = log.read_text(encoding="utf-8")
        assert re.search(r"stop=cancelled[\s\S]*ledger", shown) and "Traceback" not in shown


@pytest.mark.subprocess
@pytest.mark.parametrize("moment", ["imports", "later imports", "load"])
def test_ctrl_c_while_starting_ends_the_process_as_a_ctrl_c_does(smollm2_service, tmp_path, moment):
    """A Ctrl-C before the chat is up: one line, no traceback, and the process ends by SIGINT
    (the shell's status 130), whenever it comes: early in Python's imports, late in them (where a
    C extension's own Python code may see it), or while llama.cpp loads the model (where it runs
    specchat's log callback, and a KeyboardInterrupt raised in a ctypes callback would be dropped)."""
    with in_a_terminal(["chat", *SMALL], tmp_path) as (process, primary):
        if moment == "load":
            _read_until(primary, r"Loading target", 60)
        else:
            time.sleep(0.3 if moment == "imports" else 1.1)
        os.write(primary, b"\x03")
        shown = _read_until(primary, r"interrupted", 60)
        assert "Traceback" not in shown and "Exception ignored" not in shown
        assert process.wait(timeout=30) == -signal.SIGINT


@pytest.mark.subprocess
def test_generate_into_a_closed_pipe_stops_quietly(smollm2_service, tmp_path):
    command = [sys.executable, "-m", "specchat", "generate", "--target", "smollm2-135m-instruct", "--runtime",
               "llamacpp", "--threads", "1", "--prompt", "Write a long story.", "--max-new-tokens", "300"]
    env = dict(os.environ, SPECCHAT_CACHE_DIR=str(tmp_path))
    done = subprocess.run(f"{shlex.join(command)} | head -c 20", shell=True, capture_output=True, text=True, env=env,
                          timeout=300)
    assert len(done.stdout) == 20 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def _swallowed_ctrl_c() -> None:
    """What a library's ``try: import X / except: ...`` does with a Ctrl-C: the handler runs
    (as SIGINT's would) and the KeyboardInterrupt is caught and dropped."""
    try:
        ctrl_c._handle(signal.SIGINT, None)
    except BaseException:  # noqa: BLE001 - the library's bare except, on purpose
        pass


def test_a_ctrl_c_a_library_swallowed_while_starting_ends_the_command_as_interrupted(monkeypatch, capsys):
    """CI saw it: a Ctrl-C early in the imports, caught by a library, and transformers failing a
    later import ("Could not import module 'LlamaConfig'") printed a traceback instead of ending
    as a Ctrl-C does. With the Ctrl-C noted, the later error ends the command as interrupted
    (status 130, one line); without one, the same error is raised as it is."""
    def start_that_fails():
        _swallowed_ctrl_c()
        raise ModuleNotFoundError("Could not import module 'LlamaConfig'")

    monkeypatch.setattr(cli, "_main", lambda argv: start_that_fails())
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 0})
    assert cli.main([]) == 130
    assert capsys.readouterr().err.strip().endswith("interrupted")
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 0})
    monkeypatch.setattr(cli, "_main", lambda argv: (_ for _ in ()).throw(ModuleNotFoundError("LlamaConfig")))
    with pytest.raises(ModuleNotFoundError):
        cli.main([])


def test_a_ctrl_c_inside_pytorchs_start_up_ends_the_command_as_interrupted(monkeypatch, capsys):
    """A Ctrl-C inside PyTorch's C start-up (``_C._initExtension``) surfaced as "TypeError: expected
    a message argument" while the command line was imported (seen about once in 12 starts with a
    Ctrl-C 0.3 s in): with the Ctrl-C noted it ends as interrupted; without one the error is raised."""
    import builtins

    import specchat.__main__ as entry

    real_import, ended = builtins.__import__, []

    def importing(name, *args, **kwargs):
        if name == "specchat.commands.cli":
            raise TypeError("expected a message argument")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", importing)
    monkeypatch.setattr(entry, "_end_as_interrupted", lambda: ended.append(True))
    monkeypatch.setattr(ctrl_c, "watch", lambda: None)
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 1})
    with pytest.raises(SystemExit) as exit_:
        entry.run()
    assert exit_.value.code == 130 and ended == [True]
    assert capsys.readouterr().err.strip() == "python -m specchat: interrupted"
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 0})
    with pytest.raises(TypeError, match="expected a message argument"):
        entry.run()


def test_a_swallowed_ctrl_c_ends_the_start_and_later_ones_are_the_commands(monkeypatch):
    """The start's end raises KeyboardInterrupt once a Ctrl-C came during it; after the start a
    Ctrl-C still raises (the prompt's and Stop's handling) but no longer marks the start."""
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 0})
    ctrl_c.end_of_start()  # no Ctrl-C: nothing raised
    with pytest.raises(KeyboardInterrupt):
        ctrl_c._handle(signal.SIGINT, None)
    assert not ctrl_c.came_while_starting()
    monkeypatch.setattr(ctrl_c, "_state", {"starting": True, "seen": 0})
    _swallowed_ctrl_c()
    assert ctrl_c.came_while_starting()
    with pytest.raises(KeyboardInterrupt):
        ctrl_c.end_of_start()
