"""Video encoding leaves this process's scheduling alone: SVT-AV1 switches the thread that opens an encoder
to SCHED_FIFO 99 where it may (root, CAP_SYS_NICE), and its worker threads inherit it (real libsvtav1)."""

import os
import threading

import numpy as np
import pytest

from robot_rl.data.lerobot.video import EpisodeVideoEncoder, VideoSettings, keep_scheduling

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling calls")


def threads() -> dict[int, tuple[int, int]]:
    """``{thread id: (policy, priority)}`` of every thread of this process."""
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            out[tid] = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
        except ProcessLookupError:
            continue
    return out


def test_an_av1_episode_leaves_every_thread_at_the_callers_scheduling(tmp_path):
    caller, before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority), threads()
    encoder = EpisodeVideoEncoder(tmp_path / "ep.mp4", 64, 48, 10, VideoSettings())
    for i in range(4):
        encoder.add(np.full((48, 64, 3), 40 * i, np.uint8))
    assert encoder.close() == 4
    after = threads()
    assert len(after) > len(before)  # the encoder's worker threads (still alive)
    assert {tid: s for tid, s in after.items() if s != before.get(tid, caller)} == {}


def test_keep_scheduling_restores_the_threads_and_gives_new_ones_the_callers_policy():
    """SCHED_BATCH needs no privilege: it stands in for the library's SCHED_FIFO."""
    caller = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    started, stop = threading.Event(), threading.Event()

    def worker() -> None:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        started.set()
        stop.wait(30)

    thread = threading.Thread(target=worker)
    try:
        with keep_scheduling():
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            thread.start()
            assert started.wait(30)
            assert threads()[thread.native_id][0] == os.SCHED_BATCH
        assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == caller
        assert threads()[thread.native_id] == caller
    finally:
        stop.set()
        thread.join()
