"""Worker threads that never keep dl-doctor alive.

``concurrent.futures`` pools use non-daemon threads that interpreter exit joins: a worker blocked in ``open()`` on a
FIFO, or in a wedged driver call, would hang the process after its reports were written. Probes that fan out use
:func:`map_daemon` instead; the engine's own timeout still bounds how long the run waits for the probe.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, List, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_daemon(func: Callable[[T], R], items: Sequence[T], workers: int = 8, name: str = "worker:") -> List[R]:
    """``[func(i) for i in items]`` on up to ``workers`` daemon threads, in order; the first exception is raised."""
    items = list(items)
    results: List[Any] = [None] * len(items)
    errors: List[BaseException] = []
    todo: "queue.Queue[int]" = queue.Queue()
    for index in range(len(items)):
        todo.put(index)

    def work() -> None:
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = func(items[index])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)

    threads = [threading.Thread(target=work, name=f"{name}{n}", daemon=True)
               for n in range(max(1, min(workers, len(items))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
