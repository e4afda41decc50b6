"""Progress bars report to the board the app polls."""

from specchat.progress import BOARD, tqdm


def test_bar_state_reaches_the_board_and_clears_on_close():
    BOARD.stage("Converting")
    with tqdm(total=4, desc="Converting m", disable=False, file=open("/dev/null", "w")) as bar:
        bar.set_postfix_str("assemble")
        snap = BOARD.snapshot()
        assert snap.stage == "Converting" and snap.bar == "Converting m (assemble)" and snap.fraction == 0.0
        bar.update(3)
        assert BOARD.snapshot().fraction == 0.75
    assert BOARD.snapshot().bar is None and BOARD.snapshot().stage == "Converting"


def test_disabled_bar_reports_nothing():
    BOARD.stage("Idle")
    with tqdm(total=10, desc="hidden", disable=True) as bar:
        bar.update(5)
    assert BOARD.snapshot().bar is None


def test_stages_are_echoed_to_the_terminal_with_the_seconds_since_the_start(monkeypatch):
    """The seconds count from the process's start (the command typed), not from the call."""
    import io

    from specchat import progress

    clock = iter([100.0, 112.34, 150.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(progress, "process_age_s", lambda: 2.5)
    out = io.StringIO()
    BOARD.echo_to(out)
    BOARD.stage("Loading target m")
    BOARD.stage("")  # nothing to say: no line
    BOARD.echo_to(None)
    BOARD.stage("Ready")  # after the echo stopped
    assert out.getvalue() == "[ 14.8 s] Loading target m\n"


def test_a_later_load_counts_from_its_own_command(monkeypatch):
    """``echoing(from_now=True)`` (the chat's /drafter): the seconds since that call, and no echo
    after the block, also when the load fails."""
    import io

    import pytest

    from specchat import progress

    clock = iter([500.0, 503.21, 510.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(progress, "process_age_s", lambda: 400.0)
    out = io.StringIO()
    with pytest.raises(RuntimeError), BOARD.echoing(out, from_now=True):
        BOARD.stage("Loading drafter d")
        raise RuntimeError("the load failed")
    BOARD.stage("Ready")
    assert out.getvalue() == "[  3.2 s] Loading drafter d\n"


def test_the_process_age_is_the_time_since_the_process_started():
    """A child process that sleeps 1 s before it asks says at least 1 s (the imports before the
    question count too), and not the machine's uptime."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import time; time.sleep(1.0); from specchat.progress import process_age_s; print(process_age_s())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parents[1])
    assert 1.0 <= float(child.stdout) < 30.0
