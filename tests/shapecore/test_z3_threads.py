"""shapecore's z3 work and garbage collection in other threads never overlap (shapecore.z3_threads)."""

import gc
import threading
import time

from shapecore import Reasoner, simplify, z3_threads
from shapecore.budget import Budget

WAIT = 0.3  # seconds the other side is kept waiting
DONE = 120  # seconds a thread may take to finish once it may: a full collection in a test worker
# holding torch, at a load of 10 on 2 cores, took more than 10 (torch 2.15 run)


def test_a_collection_started_in_another_thread_waits_until_z3_work_ends():
    collected = threading.Event()

    def collect():
        gc.collect()
        collected.set()

    with z3_threads.exclusive():
        assert z3_threads.held()
        other = threading.Thread(target=collect)
        other.start()
        time.sleep(WAIT)
        assert not collected.is_set(), "the collection ran while shapecore was inside z3"
    other.join(timeout=DONE)
    assert collected.is_set() and not z3_threads.held()


class _SlowToFree:
    """Garbage in a reference cycle whose finalizer takes a while (it runs inside a collection)."""

    def __init__(self, started: threading.Event, finished: threading.Event) -> None:
        self.started, self.finished, self.cycle = started, finished, self

    def __del__(self) -> None:
        self.started.set()
        time.sleep(WAIT)
        self.finished.set()


def test_z3_work_waits_until_a_collection_running_in_another_thread_ends():
    started, finished = threading.Event(), threading.Event()

    def collect():
        _SlowToFree(started, finished)  # only the collector can free it
        gc.collect()

    gc.collect()  # nothing else pending
    other = threading.Thread(target=collect)
    other.start()
    assert started.wait(timeout=DONE)
    with z3_threads.exclusive():
        assert finished.is_set(), "shapecore entered z3 while another thread's collection was freeing objects"
    other.join(timeout=DONE)


def test_shapecore_asks_z3_only_inside_exclusive(monkeypatch):
    inside: list[bool] = []
    check = Budget.check

    def recording(self, solver, *assumptions):
        inside.append(z3_threads.held())
        return check(self, solver, *assumptions)

    monkeypatch.setattr(Budget, "check", recording)
    reasoner = Reasoner()
    reasoner.add_fact("Eq(Mod(x*y, 6), 0)")
    reasoner.add_fact("Eq(Mod(y, 3), 1)")
    reasoner.prove("Eq(Mod(x, 3), 0)")  # needs z3: nonlinear, beyond the cheap layers
    simplify(["Eq(Mod(x*y, 6), 0)", "Eq(Mod(y, 3), 1)", "Eq(Mod(x, 3), 0)"])
    assert inside and all(inside), inside


def test_a_dropped_solver_session_gives_its_z3_objects_back_inside_exclusive(monkeypatch):
    from shapecore import z3backend

    freed_inside: list[bool] = []
    original = z3backend.z3.Context.__del__

    def recording(self):
        freed_inside.append(z3_threads.held())
        original(self)

    monkeypatch.setattr(z3backend.z3.Context, "__del__", recording)
    reasoner = Reasoner()
    reasoner.add_fact("Eq(Mod(x*y, 6), 0)")
    reasoner.prove("Eq(Mod(x*y, 3), 0)")
    del reasoner
    gc.collect()
    assert freed_inside and all(freed_inside), freed_inside
