"""What the engine did for one graph: counts and seconds, so a user can see what got batched."""
from __future__ import annotations

import time
from collections import defaultdict


class Stats:
    def __init__(self):
        self.forward_batches = 0
        self.backward_batches = 0
        self.forward_nodes = 0
        self.copies_done = 0
        self.copies_skipped = 0
        self.view_nodes = 0              # nodes whose output is their inputs' memory (no kernel)
        self.schedule_s = 0.0
        self.forward_s = 0.0
        self.backward_s = 0.0
        self.engine_s = 0.0
        self.forward_calls = 0
        self.backward_calls = 0
        self.sizes = defaultdict(list)   # signature name -> batch sizes

    def as_dict(self, graph) -> dict:
        build = self._build_s
        if self.forward_calls == 0:    # nothing ran yet: all time so far was building
            build += time.perf_counter() - graph._t_mark
        return {
            "strategy": graph.strategy.value,
            "nodes": graph.node_count(),
            "forward_nodes": self.forward_nodes,
            "forward_batches": self.forward_batches,
            "backward_batches": self.backward_batches,
            "forward_calls": self.forward_calls,
            "forward_rounds": self.forward_calls,  # forwards that computed something (batched_map: one per round)
            "backward_calls": self.backward_calls,
            "copies_done": self.copies_done,
            "copies_skipped": self.copies_skipped,
            "view_nodes": self.view_nodes,
            "build_s": build,
            "schedule_s": self.schedule_s,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "signatures": {k: list(v) for k, v in self.sizes.items()},
        }

    _build_s = 0.0


def summary(d: dict) -> str:
    """A few human-readable lines from ``stats()``."""
    lines = [f"strategy {d['strategy']}: {d['nodes']} nodes, {d['forward_batches']} forward / "
             f"{d['backward_batches']} backward batches, copies {d['copies_done']} done / "
             f"{d['copies_skipped']} skipped",
             f"seconds: build {d['build_s']:.4f}, schedule {d['schedule_s']:.4f}, "
             f"forward {d['forward_s']:.4f}, backward {d['backward_s']:.4f}"]
    for name, sizes in sorted(d["signatures"].items(), key=lambda kv: -sum(kv[1]))[:15]:
        lines.append(f"  {name:24s} {len(sizes):5d} batches, mean size {sum(sizes) / len(sizes):7.1f}")
    return "\n".join(lines)
