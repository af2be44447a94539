"""batched_map: run per-instance Python code that reads values mid-way, batched.

Each instance runs ``fn(item)`` in its own thread, but only ONE thread runs at a time:
control is handed from instance to instance with per-instance semaphores, always in
item order, so graph building is as deterministic and race-free as a plain loop.

A value read (``value()``, ``npvalue()``, ``forward()``...) of a node that is not
computed yet calls ``graph.COOP.park``: the instance stops there and hands control
to the next live instance of the pass. When every live instance is parked or done,
the coordinator (the caller's thread) runs ONE forward up to the largest requested
node, which computes the pending nodes of all instances in big batches, and starts
the next pass. Greedy decoding of N sequences of length L thus takes about L
forward rounds instead of N*L (see ``stats()["forward_rounds"]``).

Errors: the exception of the lowest-index failing instance is re-raised (with its
own traceback) once the instances before it have finished; instances after it are
cancelled at their next value read. That is exactly what a plain loop would raise.
"""
from __future__ import annotations

import threading

from . import runtime
from .errors import AutobatchError
from .graph import COOP, cg


class InstanceCancelled(BaseException):
    """Raised inside an instance of batched_map that will not be resumed (an earlier
    instance failed). A BaseException so that ``except Exception`` in user code lets it pass."""


class _Instance:
    __slots__ = ("k", "item", "go", "done", "result", "exc", "want", "cancel", "thread")

    def __init__(self, k, item):
        self.k, self.item = k, item
        self.go = threading.Semaphore(0)   # released when it is this instance's turn
        self.done = False
        self.result = self.exc = self.want = None
        self.cancel = False                # resume by raising InstanceCancelled


class _Runner:
    def __init__(self, fn, items):
        self.fn = fn
        self.graph = cg()
        self.insts = [_Instance(k, x) for k, x in enumerate(items)]
        self.back = threading.Semaphore(0)  # released when a pass is over
        self.queue: list = []               # live instances of the current pass, in order
        self.pos = 0

    # --- instance side (runs in the instance threads, one at a time) ---------
    def _hand_on(self):
        """Give control to the next instance of this pass, or back to the coordinator."""
        self.pos += 1
        if self.pos < len(self.queue):
            self.queue[self.pos].go.release()
        else:
            self.back.release()

    def _body(self, inst):
        COOP.park, COOP.inst = self._park, inst
        inst.go.acquire()
        try:
            if inst.cancel:
                raise InstanceCancelled()
            inst.result = self.fn(inst.item)
        except BaseException as e:  # noqa: BLE001  (handed to the caller, never lost)
            inst.exc = e
        finally:
            inst.done = True
            self._hand_on()

    def _park(self, graph, i):
        """graph.forward_to(i) in an instance thread: wait for the batched forward."""
        inst = COOP.inst
        if inst.cancel:
            raise InstanceCancelled()
        inst.want = (graph, i)
        self._hand_on()
        inst.go.acquire()
        inst.want = None
        if inst.cancel:
            raise InstanceCancelled()

    # --- coordinator side (the caller's thread) ---------------------------------
    def _pass(self):
        """Resume every live instance once, in order; returns when all are parked or done."""
        self.queue = [x for x in self.insts if not x.done]
        if not self.queue:
            return False
        self.pos = 0
        self.queue[0].go.release()
        self.back.acquire()
        return True

    def _forward(self):
        """One batched forward for all parked instances (per graph, up to the largest request)."""
        hi: dict = {}
        for x in self.insts:
            if not x.done and not x.cancel and x.want is not None:
                g, i = x.want
                if hi.get(g, -1) < i:
                    hi[g] = i
        try:
            for g, i in hi.items():
                g.forward_to(i)
        except Exception:  # noqa: BLE001
            # The batched forward failed (and was undone). Resuming the instances anyway
            # makes each one compute its own value in forward_to, so the error surfaces,
            # with its traceback, in the first instance whose nodes cause it.
            pass

    def _cancel_after_failure(self):
        failed = [x.k for x in self.insts if x.exc is not None and not isinstance(x.exc, InstanceCancelled)]
        if failed:
            first = min(failed)
            for x in self.insts[first + 1:]:
                x.cancel = True

    def run(self):
        threads = []
        for x in self.insts:
            t = threading.Thread(target=self._body, args=(x,), daemon=True,
                                 name=f"batched_map-{x.k}")
            x.thread = t
            threads.append(t)
            t.start()
        clean = renewed = False
        try:
            while self._pass():
                if runtime.state().graph is not self.graph:   # an instance renewed it
                    renewed = True
                    for x in self.insts:
                        x.cancel = True
                    continue
                self._cancel_after_failure()
                self._forward()
            clean = True
        finally:
            if not clean:  # the coordinator itself was interrupted: cancel what is still parked
                for x in self.insts:
                    x.cancel = True
        for t in threads:
            t.join()
        if renewed:
            raise AutobatchError("renew_cg() was called inside batched_map: all instances share one "
                                 "computation graph; call renew_cg() before batched_map instead")
        for x in self.insts:
            if x.exc is not None and not isinstance(x.exc, InstanceCancelled):
                e = x.exc
                if hasattr(e, "add_note"):
                    e.add_note(f"(raised in batched_map instance {x.k})")
                raise e
        return [x.result for x in self.insts]


def batched_map(fn, items) -> list:
    """``[fn(x) for x in items]``, but value reads inside ``fn`` are batched across items.

    ``fn`` is ordinary per-instance code: it builds expressions in the current graph and
    may call ``value()``, ``npvalue()``, ``scalar_value()`` mid-way. Results come back in
    order; returned Expressions stay in the shared graph (``esum(results).backward()``
    trains them all). Do not call ``renew_cg()`` inside ``fn``. Draw random numbers from
    a per-item generator if results must match a plain loop; dropout masks differ
    (they are seeded by node position). Nested calls run their items one by one inside
    the enclosing instance (whose value reads are still batched)."""
    items = list(items)
    if COOP.park is not None:       # nested inside an instance: plain loop, reads still park
        return [fn(x) for x in items]
    if not items:
        return []
    return _Runner(fn, items).run()
