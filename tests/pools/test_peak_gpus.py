"""Unit tests of the pure sweep that finds the most GPUs reserved at one moment."""

from datetime import UTC, datetime

from pools.peaks import Period, peak_gpus


def at(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


WINDOW = {"within_start": at(1), "within_end": at(31)}


def test_no_periods_peak_is_zero():
    assert peak_gpus([], **WINDOW) == 0


def test_overlapping_periods_add_up():
    periods = [Period(at(1), at(10), 4), Period(at(5), at(20), 8), Period(at(8), at(9), 2)]
    assert peak_gpus(periods, **WINDOW) == 14


def test_back_to_back_periods_do_not_overlap():
    periods = [Period(at(1), at(10), 8), Period(at(10), at(20), 8)]
    assert peak_gpus(periods, **WINDOW) == 8


def test_only_the_window_counts():
    periods = [Period(at(1), at(5), 16), Period(at(6), at(9), 4)]
    assert peak_gpus(periods, within_start=at(5), within_end=at(31)) == 4


def test_disjoint_periods_peak_is_the_largest():
    periods = [Period(at(1), at(2), 3), Period(at(3), at(4), 7), Period(at(5), at(6), 5)]
    assert peak_gpus(periods, **WINDOW) == 7
