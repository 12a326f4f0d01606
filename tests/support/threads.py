"""Run one function in several threads at once and collect what they raised, so a
concurrency test states its work and its check, not the thread bookkeeping."""
from __future__ import annotations

import threading
from typing import Callable


def run_in_threads(target: Callable[[int], object], count: int,
                   timeout: float = 60.0) -> list[BaseException]:
    """Call ``target(k)`` for k in range(count), each in its own thread, released together
    by a barrier; return the exceptions raised (empty when every call returned). Fails the
    test when a thread is still running after ``timeout`` seconds."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def wrapped(k: int) -> None:
        try:
            start.wait()
            target(k)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)
    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors
