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
    import io

    from specchat import progress

    clock = iter([100.0, 112.34, 150.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    BOARD.echo_to(out)
    BOARD.stage("Loading target m")
    BOARD.stage("")  # nothing to say: no line
    BOARD.echo_to(None)
    BOARD.stage("Ready")  # after the echo stopped
    assert out.getvalue() == "[ 12.3 s] Loading target m\n"
