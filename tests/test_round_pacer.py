"""adapters.round_pacer: the wait before a worker's next round follows the share of the
last window its rounds took."""

from __future__ import annotations

import pytest

from streamdet.adapters.round_pacer import RoundPacer


def _gather(pacer: RoundPacer, now: float) -> float:
    """The wait the worker would take at `now`."""
    return pacer.gather_for(pacer.busy_share(now))


def _pacer_busy(share: float, window_s: float = 2.0, rounds: int = 40) -> RoundPacer:
    """A pacer whose last window held `rounds` evenly spread rounds, `share` of it busy."""
    pacer = RoundPacer(0.25, window_s=window_s)
    step = window_s / rounds
    for i in range(rounds):
        began = 100.0 - window_s + i * step
        pacer.ran(began, began + share * step)
    return pacer


def test_an_idle_worker_takes_its_rounds_at_once():
    assert _gather(RoundPacer(0.25), 5.0) == 0.0  # no round yet
    assert _gather(_pacer_busy(0.1), 100.0) == 0.0
    assert _gather(_pacer_busy(0.5), 100.0) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("share", "gather"), [(0.7, 0.125), (0.9, 0.25), (0.97, 0.25)])
def test_the_wait_grows_with_the_busy_share_up_to_the_most(share, gather):
    pacer = _pacer_busy(share)
    assert pacer.busy_share(100.0) == pytest.approx(share)
    assert _gather(pacer, 100.0) == pytest.approx(gather)


def test_rounds_older_than_the_window_no_longer_count():
    pacer = _pacer_busy(0.9)
    assert _gather(pacer, 100.0) == pytest.approx(0.25)
    # half a window later, half of it busy: the share is counted on the part left
    assert pacer.busy_share(101.0) == pytest.approx(0.45)
    assert _gather(pacer, 102.0) == 0.0
    assert not pacer.spans  # forgotten


def test_a_round_still_running_counts_up_to_now():
    pacer = RoundPacer(0.2, window_s=1.0)
    pacer.ran(9.5, 10.5)  # a long round reported late: only its part inside counts
    assert pacer.busy_share(10.0) == pytest.approx(0.5)


def test_no_ceiling_no_wait():
    pacer = RoundPacer(0.0)
    pacer.ran(0.0, 2.0)
    assert _gather(pacer, 2.0) == 0.0


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="low < high"):
        RoundPacer(0.1, low=0.8, high=0.3)
