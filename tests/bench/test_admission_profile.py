"""The admission benchmark's submit tasks by the second they started in (bench/admission_profile.py): every task of
the phase is counted in the second of its start since the first task's, and the seconds after the last task are
there, empty, so that a reader sees where the tasks stopped."""

from bench.admission_profile import tasks_by_second


def test_tasks_are_counted_in_the_second_they_started_in_with_their_mean_and_longest_run():
    runs = {
        1: (100.0, 100.3),  # second 0
        2: (100.9, 102.9),  # second 0: a 2 s task started before the first second ended
        3: (101.2, 101.6),  # second 1
        4: (103.5, 103.6),  # second 3
    }
    rows = tasks_by_second(runs, seconds=5)
    assert [row["second"] for row in rows] == [0, 1, 2, 3, 4]
    assert [row["started"] for row in rows] == [2, 1, 0, 1, 0]
    assert rows[0]["mean_ms"] == 1150.0 and rows[0]["max_ms"] == 2000.0
    assert rows[1]["mean_ms"] == 400.0
    assert rows[2] == {"second": 2, "started": 0, "mean_ms": None, "max_ms": None}
    assert rows[3]["max_ms"] == 100.0


def test_tasks_after_the_window_are_left_out_and_no_tasks_give_no_rows():
    runs = {1: (10.0, 10.5), 2: (40.0, 40.1)}
    rows = tasks_by_second(runs, seconds=3)
    assert sum(row["started"] for row in rows) == 1
    assert tasks_by_second({}) == []
