"""Denormal floats flushed to zero (autobatch/denormals.py), as DyNet does at import."""
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import autobatch as dy

# where the module can set the mode: x86-64 with the System V calling convention
SUPPORTED = platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"
needs_mode = pytest.mark.skipif(not SUPPORTED, reason="no way to set FTZ/DAZ on this machine")

TINY = np.float32(2e-38)           # normal (float32 denormals lie below 1.18e-38); a tenth is not


@pytest.fixture
def restore_mode():
    was = dy.flush_denormal()
    yield
    if was is not None:
        dy.set_flush_denormal(was)


def _quotient_in_fresh_process(env_value):
    env = dict(os.environ)
    env.pop("AUTOBATCH_FLUSH_DENORMAL", None)
    if env_value is not None:
        env["AUTOBATCH_FLUSH_DENORMAL"] = env_value
    code = "import numpy as np, autobatch; print(float(np.float32(2e-38) / np.float32(10)))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout)


@needs_mode
def test_import_flushes_unless_told_not_to():
    assert _quotient_in_fresh_process(None) == 0.0
    assert _quotient_in_fresh_process("0") == pytest.approx(2e-39, rel=1e-3)


@needs_mode
def test_set_and_unset(restore_mode):
    assert dy.set_flush_denormal(False) is True and dy.flush_denormal() is False
    assert TINY / np.float32(10) > 0                                  # a denormal result
    denormal = TINY / np.array([10], dtype=np.float32)
    assert denormal[0] > 0 and (denormal * np.float32(1))[0] > 0
    assert dy.set_flush_denormal(True) is True and dy.flush_denormal() is True
    assert TINY / np.float32(10) == 0                                 # flushed result (FTZ)
    assert (denormal * np.float32(1))[0] == 0                         # denormal input read as 0 (DAZ)


@pytest.mark.skipif(SUPPORTED, reason="the unsupported path")
def test_unsupported_machine_changes_nothing():
    assert dy.set_flush_denormal(True) is False and dy.flush_denormal() is None


@needs_mode
def test_adam_moments_of_an_unused_row_never_go_denormal(restore_mode):
    """A row that got one gradient and then none: its first moment shrinks by beta_1 per
    dense update and would spend some 150 updates as a denormal (each operation on it ~40x
    slower); flushed, it goes from normal straight to zero."""
    dy.set_flush_denormal(True)
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters((4, 3), init=np.full((4, 3), 0.5))
    tr = dy.AdamTrainer(pc)
    tr.set_sparse_updates(False)
    seen = []
    for step in range(900):
        dy.renew_cg()
        dy.sum_elems(dy.lookup(E, 0 if step == 0 else 1)).backward()
        tr.update()
        m = tr._aux[E][0][0]          # row 0's first moment
        seen.append(float(np.abs(m).max()))
    assert seen[0] > 0 and seen[-1] == 0
    assert not any(0 < s < np.finfo(np.float32).tiny for s in seen)


@pytest.mark.skipif(not SUPPORTED or not os.path.exists("/proc/self/maps"), reason="needs the mode and /proc")
def test_no_page_is_left_writable_and_executable():
    """The two functions' page is made read+execute once written (never both at once)."""
    assert dy.flush_denormal() is not None
    with open("/proc/self/maps") as f:
        assert not [line for line in f if line.split()[1].startswith("rwx")]
