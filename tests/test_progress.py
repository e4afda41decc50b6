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
