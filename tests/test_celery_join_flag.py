"""Why every test starts with Celery's join flag cleared (tests/conftest.py): the flag is one for the process, and two
threads each running an eager task can leave it set when they finish in the order below. Then a later test's
`.apply().get()` fails ("Never call result.get() within a task!") for a reason that is not its own."""

import threading

from celery.result import denied_join_result, task_join_will_block


def test_two_eager_tasks_in_two_threads_can_leave_the_process_wide_flag_set():
    assert not task_join_will_block()  # the conftest fixture cleared it for this test
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with denied_join_result():  # what apply_async does around an eager task
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with denied_join_result():
            second_in.set()
            first_out.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    try:
        assert task_join_will_block(), "the second thread put back the value it saw while the first held the flag"
    finally:
        from celery.result import _set_task_join_will_block

        _set_task_join_will_block(False)
