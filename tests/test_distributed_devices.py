"""Device names as TensorFlow's (/job/replica/task/device), their merge in nested
scopes, and the rule that a task of a cluster is an error without one. No dask
needed."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.device_spec import DeviceSpec, canonical_device, merge_devices, parse_device
from graphflow.errors import InvalidArgumentError


@pytest.mark.parametrize("name, spec, canonical", [
    ("/job:worker/replica:0/task:1/device:CPU:0", DeviceSpec("cpu", 0, "worker", 0, 1),
     "/job:worker/replica:0/task:1/device:CPU:0"),
    ("/job:worker/task:1", DeviceSpec(None, None, "worker", None, 1), "/job:worker/task:1"),
    ("/job:ps/task:0", DeviceSpec(None, None, "ps", None, 0), "/job:ps/task:0"),
    ("/job:ps/gpu:1", DeviceSpec("gpu", 1, "ps"), "/job:ps/device:GPU:1"),
    ("/task:3", DeviceSpec(None, None, None, None, 3), "/task:3"),
    ("task:3", DeviceSpec(None, None, None, None, 3), "/task:3"),
    ("/gpu:0", DeviceSpec("gpu", 0), "/device:GPU:0"),
    ("gpu:1", DeviceSpec("gpu", 1), "/device:GPU:1"),
    ("/GPU:0", DeviceSpec("gpu", 0), "/device:GPU:0"),
    ("/cpu", DeviceSpec("cpu", None), "/device:CPU:0"),
    ("/device:GPU:*", DeviceSpec("gpu", None), "/device:GPU:0"),
    ("/device:XLA_CPU:2", DeviceSpec("xla_cpu", 2), "/device:XLA_CPU:2"),
    ("/job:Worker_2/task:01/device:cpu:0", DeviceSpec("cpu", 0, "Worker_2", None, 1),
     "/job:Worker_2/task:1/device:CPU:0"),
    ("", DeviceSpec(), ""),
])
def test_parse_and_canonical(name, spec, canonical):
    assert parse_device(name) == spec
    assert canonical_device(name) == canonical
    assert canonical_device(canonical) == canonical  # canonical names are fixed points


@pytest.mark.parametrize("bad", [
    "/job:1worker", "/job:wor-ker", "/job:", "/task:x", "/task:-1", "/replica:a",
    "/job:worker//task:1", "/job:worker/", "/", "/task:1/job:worker", "/cpu:0/cpu:0",
    "/job:workerreplica:0", "/tpu:0", "gpu:x", "/device:GPU:0:1", "/device::0", "nonsense",
    "/task:99999999999", "/task:2147483648", "/JOB:worker",
])
def test_malformed_names_are_errors(bad):
    with pytest.raises(InvalidArgumentError, match="Malformed device specification"):
        parse_device(bad)
    with pytest.raises(InvalidArgumentError, match="Malformed device specification"):
        gf.Scope(gf.Graph()).with_device(bad)


def test_task_parts_and_local_job():
    spec = parse_device("/job:worker/replica:0/task:1/device:GPU:2")
    assert spec.task_name == "/job:worker/replica:0/task:1"
    assert spec.device_name == "/device:GPU:2" and spec.local() == DeviceSpec("gpu", 2)
    assert spec.has_task
    for local in ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost", "/cpu:0", ""):
        assert not parse_device(local).has_task, local
    for remote in ("/job:localhost/task:1", "/task:0", "/replica:0", "/job:ps"):
        assert parse_device(remote).has_task, remote


@pytest.mark.parametrize("outer, inner, merged", [
    ("/job:worker/task:1", "/gpu:0", "/job:worker/task:1/device:GPU:0"),
    ("/job:worker/task:1/device:GPU:1", "/cpu:0", "/job:worker/task:1/device:CPU:0"),
    ("/job:worker/task:1/device:GPU:1", "/task:2", "/job:worker/task:2/device:GPU:1"),
    ("/job:worker/task:1", "/job:ps", "/job:ps/task:1"),
    ("/gpu:0", "/job:worker/task:1", "/job:worker/task:1/device:GPU:0"),
    ("/job:worker/task:1", "", "/job:worker/task:1"),
    ("", "/cpu:0", "/device:CPU:0"),
])
def test_nested_scopes_merge(outer, inner, merged):
    assert merge_devices(outer, inner) == merged
    scope = gf.Scope(gf.Graph()).with_device(outer).with_device(inner)
    assert scope.device == merged
    assert scope.constant(1.0).op.device == merged


def test_none_clears_and_scopes_stay_immutable():
    root = gf.Scope(gf.Graph())
    worker = root.with_device("/job:worker/task:1")
    assert worker.with_device(None).device == "" and root.device == ""
    assert worker.with_device("/gpu:0").device == "/job:worker/task:1/device:GPU:0"
    assert worker.device == "/job:worker/task:1"


_devices = st.one_of(st.just((None, None)), st.tuples(st.sampled_from(["cpu", "gpu", "xla_cpu"]),
                                                       st.one_of(st.none(), st.integers(0, 7))))
_specs = st.builds(
    lambda device, job, replica, task: DeviceSpec(*device, job, replica, task), _devices,
    st.sampled_from([None, "worker", "ps", "Chief_1"]), st.one_of(st.none(), st.integers(0, 3)),
    st.one_of(st.none(), st.integers(0, 9)))


@given(_specs)
def test_round_trip(spec):
    assert parse_device(str(spec)) == spec


@given(_specs, _specs, _specs)
def test_merge_is_field_wise_and_associative(a, b, c):
    m = a.merged_with(b)
    for field in ("job", "replica", "task"):
        assert getattr(m, field) == (getattr(b, field) if getattr(b, field) is not None
                                     else getattr(a, field))
    assert (m.device_type, m.index) == ((b.device_type, b.index) if b.device_type is not None
                                        else (a.device_type, a.index))
    assert a.merged_with(b).merged_with(c) == a.merged_with(b.merged_with(c))


@pytest.mark.parametrize("device", ["/job:worker/task:1", "/job:worker/replica:0/task:7/cpu:0",
                                    "/job:ps/task:0", "/task:2/device:CPU:0"])
@pytest.mark.parametrize("optimize", [True, False])
def test_task_without_cluster_is_an_error(device, optimize):
    """Never silently local: also when the op would be folded away as a constant."""
    scope = gf.Scope(gf.Graph())
    x = scope.with_device(device).constant(np.float32(1), name="x")
    y = scope.add(x, 1.0, name="y")
    with gf.Session(scope.graph, gf.SessionConfig(optimize=optimize)) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(y)
    message = str(info.value)
    assert info.value.node_name == "x" and canonical_device(device) in message
    assert "no cluster" in message and "gf.SessionConfig(cluster=client)" in message
    assert "test_distributed_devices.py" in message  # the user's file:line


def test_localhost_is_the_local_process():
    scope = gf.Scope(gf.Graph())
    x = scope.with_device("/job:localhost/replica:0/task:0").constant(np.float32(2))
    y = scope.with_device("/job:localhost/replica:0/task:0/device:CPU:0").mul(x, x)
    with gf.Session(scope.graph) as sess:
        assert sess.run(y) == 4


def test_task_names_survive_serialization():
    scope = gf.Scope(gf.Graph())
    scope.with_device("/job:worker/task:1").with_device("/cpu:0").constant(1.0, name="c")
    copy = gf.import_graph_def(scope.graph.as_graph_def())
    assert copy["c"].device == "/job:worker/task:1/device:CPU:0"
