"""Placement and device copies, checked on the CPU with a simulated GPU: a
device of type "gpu" whose arrays are numpy arrays, so GPU kernels written
against ``ctx.xp`` run here and every host<->device crossing is visible."""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.runtime import CPUDevice

from support.gpu_devices import SimulatedGPU


@pytest.fixture
def devices():
    return [CPUDevice(0), SimulatedGPU(0)]


def _placement(sess, fetches, feeds=()):
    plan = sess._plan(list(fetches), list(feeds))
    return {op.name: d.name for op, d in plan.placement.items()}, plan


def test_gpu_preferred_and_copies_inserted(scope, devices):
    x = scope.placeholder(gf.float32, shape=[3], name="x")
    y = scope.add(x, 1.0, name="y")
    z = scope.mul(y, 2.0, name="z")
    with gf.Session(scope.graph, devices=devices) as sess:
        where, plan = _placement(sess, [z], [x])
        assert where["y"] == where["z"] == "/device:GPU:0"
        copies = [s.label for s in plan.steps if s.op is None]
        assert copies == ["copy x:0 -> /device:GPU:0"]  # the feed crosses once
        np.testing.assert_array_equal(sess.run(z, {x: np.ones(3, np.float32)}), [4, 4, 4])
        assert devices[1].copies_out == 1  # the fetched value comes back to the host


def test_with_device_honoured_and_copies_both_ways(scope, devices):
    x = scope.constant(np.arange(4, dtype=np.float32), name="x")
    on_cpu = scope.with_device("/cpu:0")
    a = on_cpu.add(x, 1.0, name="a")
    b = scope.with_device("/gpu:0").mul(a, a, name="b")
    c = on_cpu.neg(b, name="c")
    with gf.Session(scope.graph, devices=devices) as sess:
        where, plan = _placement(sess, [c])
        assert (where["a"], where["b"], where["c"]) == ("/device:CPU:0", "/device:GPU:0",
                                                        "/device:CPU:0")
        labels = [s.label for s in plan.steps if s.op is None]
        assert "copy a:0 -> /device:GPU:0" in labels and "copy b:0 -> /device:CPU:0" in labels
        np.testing.assert_array_equal(sess.run(c), -(np.arange(4) + 1.0) ** 2)
        assert (devices[1].copies_in, devices[1].copies_out) == (1, 1)


def test_strings_stay_on_cpu(scope, devices, caplog):
    s = scope.with_device("/gpu:0").add(scope.constant(["a"]), "b", name="concat")
    with gf.Session(scope.graph, devices=devices) as sess:
        with caplog.at_level("INFO", logger="graphflow.placement"):
            where, _ = _placement(sess, [s])
        assert where["concat"] == "/device:CPU:0"
        assert "no supported kernel for GPU" in caplog.text
        assert sess.run(s).tolist() == [b"ab"]


def test_soft_placement_without_a_gpu(scope, run):
    y = scope.with_device("/gpu:0").add(scope.constant([1.0]), 1.0, name="y")
    assert run(y).tolist() == [2.0]  # only the CPU exists: falls back
    with pytest.raises(InvalidArgumentError, match="Could not satisfy explicit device"):
        run(y, allow_soft_placement=False)


def test_soft_placement_off_with_gpu_but_no_kernel(scope, devices):
    s = scope.with_device("/gpu:0").add(scope.constant(["a"]), "b", name="concat")
    config = gf.SessionConfig(allow_soft_placement=False)
    with gf.Session(scope.graph, config, devices=devices) as sess:
        with pytest.raises(InvalidArgumentError, match="no supported kernel for GPU devices"):
            sess.run(s)


def test_log_device_placement(scope, devices, capsys):
    y = scope.add(scope.constant([1.0], name="c"), 1.0, name="y")
    with gf.Session(scope.graph, gf.SessionConfig(log_device_placement=True), devices=devices) as sess:
        sess.run(y)
    err = capsys.readouterr().err
    assert "y: (Add): /device:GPU:0" in err


def test_prefers_device_of_input(scope, devices):
    x = scope.with_device("/cpu:0").constant(np.ones(2, np.float32), name="x")
    y = scope.add(x, 1.0, name="y")
    with gf.Session(scope.graph, devices=devices) as sess:
        where, plan = _placement(sess, [y])
        assert where["y"] == "/device:CPU:0" and not any(s.op is None for s in plan.steps)


def test_list_devices_without_gpu():
    names = [d.name for d in gf.list_devices()]
    assert names[0] == "/device:CPU:0"


def test_gpu_kernels_run_bound_to_their_device(scope):
    """Each kernel is called through its device's ``bind``: a GPU makes itself current
    there, since the executor's threads start on device 0."""
    class RecordingGPU(SimulatedGPU):
        def __init__(self, index):
            super().__init__(index)
            self.ran = []

        def bind(self, kernel):
            def on_this_device(ctx, *args):
                self.ran.append(ctx.node_name)
                return kernel(ctx, *args)
            return on_this_device

    gpus = [RecordingGPU(0), RecordingGPU(1)]
    x = scope.placeholder(gf.float32, shape=[3], name="x")
    a = scope.with_device("/gpu:1").add(x, 1.0, name="a")
    b = scope.with_device("/gpu:0").mul(a, 2.0, name="b")
    c = scope.with_device("/cpu:0").neg(b, name="c")
    with gf.Session(scope.graph, devices=[CPUDevice(0), *gpus]) as sess:
        np.testing.assert_array_equal(sess.run(c, {x: np.zeros(3, np.float32)}), [-2] * 3)
    assert "a" in gpus[1].ran and "a" not in gpus[0].ran
    assert "b" in gpus[0].ran and "b" not in gpus[1].ran
    assert "c" not in gpus[0].ran + gpus[1].ran


def test_a_new_kind_of_device_needs_only_its_own_code(scope):
    """A device type the runtime has never heard of: a Device subclass, a discovery
    function and a kernel for it. Placement honours it and copies go both ways."""
    from graphflow.runtime import device_discovery as registry

    class ToyDevice(gf.runtime.Device):
        device_type = "toy"

        def from_host(self, array):
            return ("toy", np.array(array, copy=True))

        def to_host(self, array):
            return array[1].copy()

        def holds(self, array):
            return isinstance(array, tuple) and array[0] == "toy"

    twice = gf.register_op("TestToyTwice", inputs=["x: float32"], outputs=["y: float32"])
    twice.shape_fn(lambda ctx: ctx.shape("x"))
    twice.kernel("toy")(lambda ctx, x: ("toy", x[1] * 2))
    registry.register_device_discovery(lambda: [ToyDevice(0)])
    try:
        x = scope.placeholder(gf.float32, shape=[3], name="x")
        y = scope.with_device("/device:TOY:0").test_toy_twice(x, name="y")
        z = scope.add(y, 1.0, name="z")
        with gf.Session(scope.graph) as sess:
            where, _ = _placement(sess, [z], [x])
            assert (where["y"], where["z"]) == ("/device:TOY:0", "/device:CPU:0")
            np.testing.assert_array_equal(sess.run(z, {x: np.arange(3, dtype=np.float32)}),
                                          [1, 3, 5])
    finally:
        registry._DISCOVERIES.pop()
        registry._discover.cache_clear()
