"""Two fixes to Numba's CUDA simulator, installed before its first launch
(``gpucourse.device`` calls ``install`` when it chooses the simulator).

* **Barriers that wait instead of polling.** The simulator runs one OS
  thread per CUDA thread, and the thread that runs a block loops over every
  other thread, without sleeping, to find when all of them wait at a
  barrier: it takes the interpreter's lock from the threads doing the work
  (half the time of an attention backward on a small problem went to it,
  2026-11-28). Here the threads post to their block when they reach a
  barrier or end, and the block's thread sleeps between posts
  (``event_driven_barriers``): on small problems attention's forward and
  backward and SGEMM's levels 5-7 ran 5-6 times faster (a 2-core machine,
  2026-11-28), levels 1-3 up to twice as fast. The interpreter's default
  switch interval then serves best (a shorter one had helped the polling
  loop).
* **Shared arrays made under a lock.** The simulator's ``cuda.shared.array``
  looks up the block's array for the calling line and creates it if it is
  missing, without a lock. Two threads that reach the line at the same
  moment can both create one, and the loser then works on a private copy
  that nobody else sees: a wrong answer, now and then (it showed as garbage
  in one row of a FlashAttention test, once in several hundred runs). The
  lookup is made under a lock here (``lock_shared_arrays``).

The graders count this module as part of the simulator, not of the course's
answers: a student's code that launches a kernel runs it
(``grader.runtime``).
"""

from __future__ import annotations

import sys


def install() -> None:
    """Both fixes, once (numba.cuda must already be in simulator mode)."""
    lock_shared_arrays()
    event_driven_barriers()


def lock_shared_arrays() -> None:
    """Make the simulator's shared-array lookup atomic (see the module's notes).

    The replacement keeps the simulator's rule (one array per block and source
    line, or the dynamic buffer for shape 0) and only adds the lock. It names
    the calling line itself, since a wrapper around the original would make
    every allocation look as if it came from the wrapper's line.
    """
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_gpucourse_locked", False):
        return
    original = shared.array

    def empty_array(block, shape, dtype, frame):
        return kernelapi.np.empty(shape, dtype)

    array = shared_array_by_calling_line(empty_array, original)
    array._gpucourse_locked = True
    array.__doc__ = original.__doc__
    shared.array = array


def shared_array_by_calling_line(make_array, original=None):
    """A replacement for the simulator's ``cuda.shared.array``: one array per
    block and calling source line, looked up under a lock, made by
    ``make_array(block, shape, dtype, frame)`` (`frame` the caller's) the first
    time a block's threads reach that line. With `original`, aligned arrays and
    the dynamic buffer (shape 0) are left to it. Used here to lock the lookup
    and by gpucourse.grader.tracing to count the accesses to shared arrays."""
    import threading

    from numba.cuda.simulator import kernelapi

    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if original is not None and (alignment is not None or shape == 0):
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            found = self._allocations.get(caller)
            if found is None:
                found = self._allocations[caller] = make_array(self, shape, dtype, frame)
        return found

    return array


def event_driven_barriers() -> None:
    """Make the simulator's barriers wait for events instead of polling.

    Numba's simulator runs a block by starting a thread per CUDA thread and
    then looping, in the launching thread, over every thread of the block to
    see whether all the live ones wait in ``syncthreads`` (then it wakes
    them) or one has raised (then it stops the others and raises). That
    loop never sleeps: it holds the interpreter's lock as often as the
    threads that do the work. Here each thread posts to its block's queue
    when it reaches a barrier and when it ends, and the launching thread
    sleeps on the queue between posts. The rules are the simulator's own: a
    barrier opens when every thread still running waits at it; a thread that
    raises stops the block and its exception is raised; the launch returns
    when every thread has ended (joined, so that anything a thread does as
    it ends, such as the sanitizer's bookkeeping, is done). The per-thread
    ``syncthreads_event`` and ``abort`` flag keep their meaning, so code that
    wakes a waiting thread to stop it still works. A post is one call into
    C (``SimpleQueue.put``) and no thread holds a lock around it: a thread
    stopped by an exception sent to it (``grader.tracing``) cannot leave the
    block's bookkeeping locked.
    """
    import queue

    import numpy as np
    from numba.cuda.simulator import kernel as simulator

    if getattr(simulator.BlockManager.run, "_gpucourse_event_driven", False):
        return
    if not _simulator_as_read(simulator):
        return  # another numba-cuda's simulator: its own barriers, slower but right
    run_thread = simulator.BlockThread.run

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        self.syncthreads_blocked = True
        self._manager._gpucourse_posts.put((self, False))  # waiting
        self.syncthreads_event.wait()
        self.syncthreads_event.clear()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def thread_run(self):
        try:
            run_thread(self)  # keeps an exception in self.exception
        finally:
            self._manager._gpucourse_posts.put((self, True))  # ended

    def block_run(self, grid_point, *args):
        posts = self._gpucourse_posts = queue.SimpleQueue()

        def target():
            self._f(*args)

        threads = [simulator.BlockThread(target, self, grid_point, point, self._debug)
                   for point in np.ndindex(*self._block_dim)]
        for thread in threads:
            thread.start()
        running, waiting = len(threads), []
        while running:
            try:  # a timeout now and then, so that a signal is seen promptly
                thread, ended = posts.get(timeout=1.0)
            except queue.Empty:
                continue
            if not ended:
                waiting.append(thread)
            elif thread.exception:
                for other in threads:  # wake and stop the others
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise thread.exception[0].with_traceback(thread.exception[1])
            else:
                running -= 1
            if running and len(waiting) == running:  # everyone at the barrier
                for thread in waiting:
                    thread.syncthreads_blocked = False
                for thread in waiting:
                    thread.syncthreads_event.set()
                waiting = []
        for thread in threads:
            thread.join()

    block_run._gpucourse_event_driven = True
    simulator.BlockThread.syncthreads = syncthreads
    simulator.BlockThread.run = thread_run
    simulator.BlockManager.run = block_run


def _simulator_as_read(simulator) -> bool:
    """Whether the simulator's block and thread classes hold what the
    replacement relies on (read in numba-cuda 0.30.4): a block's function,
    block shape and debug flag, and a thread's manager, barrier event and
    flags. pyproject allows later versions; where one differs, the
    simulator keeps its own barriers."""
    block = simulator.BlockManager.__init__.__code__.co_names
    thread = simulator.BlockThread.__init__.__code__.co_names + \
        simulator.BlockThread.run.__code__.co_names
    return (all(name in block for name in ("_f", "_block_dim", "_debug"))
            and all(name in thread for name in ("syncthreads_event", "syncthreads_blocked",
                                                "_manager", "abort", "exception")))

