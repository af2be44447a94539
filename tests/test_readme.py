"""The README's example must run as written and batch what it claims to batch."""
import pathlib
import re

import autobatch as dy

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs_and_batches(capsys):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    exec(compile(code, str(README), "exec"), {})
    out = capsys.readouterr().out
    loss = float(out.splitlines()[0])
    assert loss > 0
    s = dy.stats()
    assert s["strategy"] == "agenda"
    assert s["forward_batches"] < s["nodes"] / 20      # 64 trees, thousands of nodes
    assert "strategy agenda:" in out


def test_readme_vertex_function_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = next(b for b in blocks if "vertex_function" in b)
    exec(compile(code, str(README), "exec"), {})
    assert float(capsys.readouterr().out.splitlines()[0]) > 0
