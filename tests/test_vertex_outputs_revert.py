"""A vertex call's outputs and DyNet's checkpoints (cg_checkpoint / cg_revert).

``out[name]`` builds its lazy-graph nodes (pickrange + reshape) when first read and keeps the
Expression. Read first between cg_checkpoint() and cg_revert(), those nodes are dropped by the
revert; the kept Expression must then not be handed out (new nodes reuse its ids): the next
read builds the nodes again."""
import numpy as np

import autobatch as dy

H = 3


def _model():
    pc = dy.ParameterCollection()
    W, b, E = pc.add_parameters((H, 2 * H)), pc.add_parameters(H), pc.add_lookup_parameters((5, H))

    @dy.vertex_function(max_children=2)
    def f(v):
        if v.is_leaf:
            h = dy.tanh(E[v.pull("w")])
        else:
            h = dy.tanh(dy.affine_transform([b, W, dy.concatenate([v.gather(0), v.gather(1)])]))
        v.scatter(h)
        v.push("h", h)
        v.push("y", dy.sum_elems(h))
    return f


def test_output_first_read_inside_a_reverted_checkpoint(f64):
    f = _model()
    gs = [dy.InputGraph([[], [], [0, 1]]), dy.InputGraph([[], [], [], [0, 1], [3, 2]])]
    w = [[1, 2, 0], [4, 3, 2, 0, 0]]
    dy.renew_cg()
    want = np.array([e.npvalue() for e in f.unbatched(gs, w=w)["h"]])
    dy.renew_cg()
    out = f(gs, w=w)                          # the call: before the checkpoint, kept by the revert
    dy.cg_checkpoint()
    np.testing.assert_allclose(out["h"].npvalue(), want, rtol=1e-12)   # a candidate reads it
    dy.cg_revert()
    dy.inputTensor(np.zeros((8, H)))          # new nodes take the dropped ids
    dy.inputVector([1.0, 2.0])
    h = out["h"]
    assert dy.cg().ops[h.i].name == "reshape"
    np.testing.assert_allclose(h.npvalue(), want, rtol=1e-12)


def test_output_read_before_the_checkpoint_survives_the_revert(f64):
    """The case that works: out[name] built before cg_checkpoint() is not dropped."""
    f = _model()
    gs = [dy.InputGraph([[], [], [0, 1]])]
    w = [[1, 2, 0]]
    dy.renew_cg()
    want = np.array([e.npvalue() for e in f.unbatched(gs, w=w)["h"]])
    dy.renew_cg()
    out = f(gs, w=w)
    h = out["h"]
    dy.cg_checkpoint()
    dy.tanh(h)
    dy.cg_revert()
    dy.inputTensor(np.zeros((3, H)))
    assert out["h"] is h
    np.testing.assert_allclose(out["h"].npvalue(), want, rtol=1e-12)
