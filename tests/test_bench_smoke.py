"""Smoke tests of the benchmark harness (bench/): tiny runs that still check real behaviour."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bench import data, report, runner, tasks
from bench import __main__ as cli

TINY = dict(hidden=8, batch_size=4, n=8, repeats=1, warmup="batch")


@pytest.mark.parametrize("task", tasks.NAMES + ["treelstm_ops"])
def test_measure_every_task(task):
    rec = runner.measure(dict(TINY, task=task, framework="autobatch", strategy="agenda"))
    assert rec["instances_per_s"] > 0 and rec["total_s"] > 0
    for k in ("build_s", "schedule_s", "forward_s", "backward_s", "update_s", "peak_rss_mb",
              "rss_delta_mb", "nodes_per_inst", "signatures"):
        assert rec[k] is not None, k
    assert 0 < rec["fwd_batches_per_inst"] <= rec["nodes_per_inst"]
    assert np.isfinite(rec["loss_warmup"]) and np.isfinite(rec["loss_last"])


def test_batching_strategies_launch_fewer_batches():
    """Tree-FC: every internal vertex has the same signature, so depth/agenda batch whole tree
    levels while 'none' launches one kernel per node."""
    b = {s: runner.measure(dict(TINY, task="treefc", framework="autobatch", strategy=s))["fwd_batches_per_inst"]
         for s in ("none", "depth", "agenda")}
    assert b["depth"] < b["none"] / 20 and b["agenda"] < b["none"] / 20


def test_training_lowers_the_loss():
    rec = runner.measure(dict(TINY, task="treelstm", framework="autobatch", strategy="depth", repeats=4, warmup="pass"))
    assert rec["loss_last"] < rec["loss_warmup"]


def test_cli_writes_json_and_table(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = cli.main(["--task", "treefc", "--strategy", "none,agenda", "--peer", "", "--hidden", "8",
                   "--batch-size", "4", "--n", "8", "--repeats", "1", "--json", str(out)])
    assert rc == 0
    recs = json.loads(out.read_text())
    assert [r["strategy"] for r in recs] == ["none", "agenda"]
    for r in recs:  # subprocess records carry the run's settings and the machine
        assert r["task"] == "treefc" and r["backend"] == "numpy" and r["hidden"] == 8 and r["n"] == 8
        assert r["instances_per_s"] > 0 and "cores" in r["machine"]
    text = capsys.readouterr().out
    assert "autobatch/agenda" in text and "inst/s" in text


def test_missing_peer_is_skipped_with_install_hint(monkeypatch):
    import bench.frameworks as fw
    monkeypatch.setattr(cli, "available", lambda name: name == "autobatch")
    runs, notes = cli.plan(cli.parse(["--peer", "dynet,torch"]))
    assert all(f == "autobatch" for f, _ in runs)
    assert any("pip install dynet38" in n for n in notes) and any("pip install torch==2.13.0" in n for n in notes)
    assert fw.INSTALL_HINT["dynet"] == "pip install dynet38"


def test_ratio_column_against_dynet_agenda():
    base = dict(runner.DEFAULTS, task="treefc", build_s=0.1, schedule_s=None, forward_s=0.1, backward_s=0.1,
                update_s=0.1, rss_delta_mb=1.0, fwd_batches_per_inst=None, bwd_batches_per_inst=None)
    recs = [dict(base, framework="autobatch", strategy="agenda", instances_per_s=50.0),
            dict(base, framework="dynet", strategy="agenda", instances_per_s=100.0)]
    recs[0]["nodes_per_inst"] = 10.0
    lines = report.table(recs).splitlines()
    assert "0.50x" in next(l for l in lines if l.startswith("autobatch/agenda"))
    # 0.1 s per pass (build; forward + backward: 0.2 s) over 10 nodes x n instances, per node
    us = 0.1 * 1e6 / (10 * recs[0]["n"])
    line = next(l for l in lines if l.startswith("per node"))
    assert "build %.2f us" % us in line and "forward + backward %.2f us" % (2 * us) in line
    assert "1.00x" in next(l for l in lines if l.startswith("dynet/agenda"))
    recs[0]["peak_rss_mb"], recs[1]["peak_rss_mb"] = 70.0, 90.0
    row = report.summary(recs).splitlines()[-1]
    assert row.startswith("| treefc | 50 | 100 | 0.50× | - |") and row.endswith("| 70 / - / 90 |")


def test_rounds_report_median_rate_and_median_of_side_by_side_ratios():
    base = dict(runner.DEFAULTS, task="treefc", build_s=0.1, schedule_s=None, forward_s=0.1, backward_s=0.1,
                update_s=0.1, rss_delta_mb=1.0, fwd_batches_per_inst=None, bwd_batches_per_inst=None)
    # (ours, DyNet) per round: the host slows both down in round 2; ours is 1.2x DyNet in
    # rounds 1 and 2 and 0.9x in round 3
    rates = [(120.0, 100.0), (60.0, 50.0), (99.0, 110.0)]
    rounds = [[dict(base, framework="autobatch", strategy="agenda", instances_per_s=a, pass_s=[k]),
               dict(base, framework="dynet", strategy="agenda", instances_per_s=d)]
              for k, (a, d) in enumerate(rates)]
    rounds[2].append(dict(base, framework="autobatch", strategy="depth", error="boom"))
    recs = report.merge_rounds(rounds)
    ours = next(r for r in recs if report.label(r) == "autobatch/agenda")
    assert ours["instances_per_s"] == 99.0 and ours["pass_s"] == [2]     # the median round, whole
    assert ours["round_ips"] == [120.0, 60.0, 99.0]
    assert ours["vs_ref"] == pytest.approx(1.2)       # not 99/100: ratios are taken per round
    assert next(r for r in recs if report.label(r) == "autobatch/depth")["error"] == "boom"
    text = report.table(recs)
    assert "median of 3 interleaved rounds" in text.splitlines()[0]
    assert "1.20x" in next(l for l in text.splitlines() if l.startswith("autobatch/agenda"))
    assert "| 1.20× |" in report.summary(recs)


def test_cli_rounds_interleave(tmp_path):
    out = tmp_path / "r.json"
    rc = cli.main(["--task", "treefc", "--strategy", "none,agenda", "--peer", "", "--hidden", "8",
                   "--batch-size", "4", "--n", "4", "--repeats", "1", "--rounds", "2", "--json", str(out)])
    assert rc == 0
    recs = json.loads(out.read_text())
    assert [r["strategy"] for r in recs] == ["none", "agenda"]
    assert all(len(r["round_ips"]) == 2 and r["instances_per_s"] in r["round_ips"] for r in recs)


def test_plot_without_matplotlib_says_so(tmp_path):
    msg = report.plot([], str(tmp_path / "p.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "pip install matplotlib" in msg


# ------------------------------------------------------------------ data
def test_synthetic_sst_statistics():
    trees, meta = data.synthetic_sst(300, seed=1)
    lens = [len(t.leaves()) for t in trees]
    assert 16 < np.mean(lens) < 22 and max(lens) <= 54
    assert 7 < np.mean([t.height() for t in trees]) < 13
    assert {n.label for t in trees for n in t.nodes()} <= set(range(5))
    assert all(0 < l.word < meta["n_words"] for t in trees for l in t.leaves())
    assert data.synthetic_sst(3, seed=1)[0][0].label == data.synthetic_sst(3, seed=1)[0][0].label  # seeded


def test_synthetic_tags_lm_treefc_statistics():
    sents, meta = data.synthetic_tags(300, seed=1)
    assert 20 < np.mean([len(w) for w, _ in sents]) < 28 and meta["n_tags"] == 9
    assert sum(c < 5 for c in meta["counts"].values()) > len(meta["counts"]) / 2  # a long rare tail
    lm, meta = data.synthetic_lm(300, seed=1)
    assert 18 < np.mean([len(s) for s in lm]) < 24 and meta["n_words"] == 10000
    fc, meta = data.complete_trees(5, seed=1)
    assert all(len(w) == 256 and y in (0, 1) for w, y in fc)


def test_real_format_loaders(tmp_path):
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "dev.txt").write_text("(3 (2 It) (4 (2 's) (4 good)))\n(1 (1 bad) (2 .))\n")
    trees, meta = data.get("treelstm", 3, path=str(tmp_path))  # a directory laid out like shared/data
    assert len(trees) == 3 and [len(t.leaves()) for t in trees] == [3, 2, 3]
    assert trees[0].label == 3 and trees[0].right.label == 4 and trees[1].left.label == 1
    tags = tmp_path / "t.txt"
    tags.write_text("John|I-PER lives|O in|O a|x|O\n")
    (sent,), meta = data.load_tagged(str(tags))
    assert sent[0] == ["John", "lives", "in", "a|x"] and [meta["tags"][t] for t in sent[1]] == ["I-PER", "O", "O", "O"]
    text = tmp_path / "lm.txt"
    text.write_text(" the cat sat \n the dog \n")
    sents, meta = data.load_text(str(text))
    assert len(sents) == 2 and sents[0][0] == sents[1][0] != 0


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")),
                    reason="../shared/data is not beside this checkout")
def test_shared_data_loads():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    for task in ("treelstm", "bilstm", "rnnlm"):
        insts, _ = data.get(task, 10, path=root)
        assert len(insts) == 10


@pytest.mark.skipif(importlib.util.find_spec("dynet") is None, reason="DyNet peer not installed (pip install dynet38)")
def test_one_model_definition_same_function_on_dynet_and_autobatch():
    """Each task's Model, with DyNet's parameter values copied over, gives autobatch the same loss
    and gradients (a separate process: importing DyNet fixes its settings for the process)."""
    p = subprocess.run([sys.executable, "-m", "bench.equivalence"], cwd=runner.REPO, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=runner.REPO))
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    assert p.stdout.count("rel") >= 2 * len(tasks.NAMES)


def test_blas_bound_counts_the_products_of_every_instance():
    """bench.floor: Tree-FC's complete trees of 256 leaves have 255 internal vertices, each one
    product with W (H, 2H), and one output product per tree; Tree-LSTM leaves make three
    products with the (H, E) leaf weights and internal nodes three with (H, 2H) and two with
    (H, H), and every node one with the output layer."""
    from bench import floor
    rows, n = floor.product_rows("treefc", 8, 2)
    labels = tasks.get("treefc").data(2)[1]["n_labels"]
    assert n == 2 and rows == {(8, 16): 2 * 255, (labels, 8): 2}
    trees, meta = tasks.get("treelstm").data(3)
    leaves = sum(len(t.leaves()) for t in trees)
    inner = leaves - len(trees)            # binary trees
    rows, _ = floor.product_rows("treelstm", 8, 3)
    assert rows == {(8, 8): 3 * leaves + 2 * inner, (8, 16): 3 * inner, (meta["n_labels"], 8): leaves + inner}
    r = floor.bound("treefc", 8, 2, 16)
    assert r["bound_ips"] > 0 and r["gflop_per_inst"] == pytest.approx(6 * (510 * 8 * 16 + 2 * labels * 8) / 2 / 1e9)


def test_the_operator_form_of_the_tree_lstm_builds_the_affine_forms_graph():
    """treelstm_ops writes each gate as dy.logistic(b + W * x): the + takes the bias into the
    product, so a tree has the nodes and batches of treelstm's affine_transform form (plus the
    cell state's two sums, and minus the output layer's bias), and trains to finite losses."""
    import autobatch as dy
    ops_task, aff_task = tasks.get("treelstm_ops"), tasks.get("treelstm")
    insts, meta = ops_task.data(6, seed=1)
    counts = {}
    for t in (ops_task, aff_task):
        pc = dy.ParameterCollection()
        m = t.Model(dy, pc, meta, 8)
        dy.renew_cg()
        assert np.isfinite(dy.esum([m.loss(dy, x) for x in insts]).value())
        c = counts[t.TITLE] = {}
        for op in dy.cg().ops:
            if op is not None:
                c[op.name] = c.get(op.name, 0) + 1
    ops, aff = counts[ops_task.TITLE], counts[aff_task.TITLE]
    tree_nodes = sum(len(x.nodes()) for x in insts)
    assert ops.pop("matmul_shared") == aff.pop("affine") == tree_nodes      # the loss's W * h
    # the cell state: esum of three products there, two + here
    assert ops.pop("add") == aff.pop("add") + sum(not n.is_leaf() for x in insts for n in x.nodes())
    assert ops == aff and ops["affine>logistic"] > 0


def test_split_times_kernels_by_phase_and_restores_the_methods():
    """bench.split: with split on, the record has kernel seconds per phase, within the phase's
    wall time (forward and backward run kernels, building Tree-FC none), and the timed methods
    are the originals again afterwards."""
    from autobatch.ops import base
    from bench import split
    ops = {cls: dict(vars(cls)) for cls in [base.Op, *split._subclasses(base.Op)]}
    rec = runner.measure(dict(TINY, task="treefc", framework="autobatch", strategy="agenda", split=True))
    k = rec["kernel_s"]
    assert k["build"] == 0.0
    assert 0 < k["forward"] <= rec["forward_s"] + rec["schedule_s"]
    assert 0 < k["backward"] <= rec["backward_s"] and 0 < k["update"] <= rec["update_s"]
    assert {cls: dict(vars(cls)) for cls in ops} == ops
    assert "kernel_s" not in runner.measure(dict(TINY, task="treefc", framework="autobatch", strategy="agenda"))


def test_split_build_floor_sees_every_call_of_the_model():
    """The stand-in answers each dy call of Tree-FC's model: per tree of 256 leaves, 256 lookups,
    255 x (concatenate, affine_transform, tanh), the output's affine_transform and
    pickneglogsoftmax; and one esum per minibatch. A model that needs real values or lists back
    (the builders' tasks) gets None."""
    from bench import split
    seconds, calls = split.build_floor("treefc", 8, 2, reps=1)
    assert seconds > 0 and calls == 2 * (256 + 3 * 255 + 2) + 1
    assert split.build_floor("bilstm", 8, 2, reps=1) == (None, None)
    assert split.floor_call_ns(1000) > 0
