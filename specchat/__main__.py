"""``python -m specchat COMMAND …`` and the ``specchat`` command (``run``)."""
import os
import signal
import sys

INTERRUPTED = 130  # what commands.cli.main returns after a Ctrl-C it did not take as "stop this reply"


def _end_as_interrupted() -> None:
    """End the process the way a Ctrl-C ends a program: killed by SIGINT, which a shell shows as
    status 130 and which stops a shell loop around the command (Python ends so on an unhandled
    KeyboardInterrupt too). ``exit(130)`` would not be reliable: once a C extension's ``PyRun_*``
    code has seen the KeyboardInterrupt, CPython 3.11 ends the process by SIGINT at exit anyway,
    so the status would depend on when the Ctrl-C came. Returns only where SIGINT cannot end it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if os.name == "posix":
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def run() -> None:
    """The entry point: the command's exit status, or an end by SIGINT after a Ctrl-C."""
    from specchat.commands import ctrl_c

    ctrl_c.watch()
    try:
        from specchat.commands.cli import main
    except (KeyboardInterrupt, Exception) as exc:
        # Ctrl-C while Python imports the command line: one line, as cli.main says it. Inside a C
        # extension's own start-up it surfaces as another error (PyTorch's _C._initExtension:
        # "TypeError: expected a message argument"): still the Ctrl-C's end, once one was noted
        if not isinstance(exc, KeyboardInterrupt) and not ctrl_c.came_while_starting():
            raise
        print("\npython -m specchat: interrupted", file=sys.stderr)
        status = INTERRUPTED
    else:
        status = main()
    if status == INTERRUPTED:
        _end_as_interrupted()
    raise SystemExit(status)


if __name__ == "__main__":
    run()
