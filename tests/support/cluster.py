"""What the distributed tests share about the test cluster (tests/conftest.py's
2-worker LocalCluster): its workers in task order, and waiting until it is whole."""
import os
import time


def workers(client) -> list[str]:
    """The workers' addresses in task order (LocalCluster names them 0, 1, ...)."""
    info = client.scheduler_info()["workers"]
    return sorted(info, key=lambda a: int(info[a]["name"]))


def healthy(client, timeout_s: float = 60.0) -> None:
    """Wait until the cluster has its 2 workers again, each of which answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(client.scheduler_info()["workers"]) == 2:
            try:
                client.run(os.getpid, workers=workers(client))
                return
            except Exception:  # noqa: BLE001 - not up yet
                pass
        time.sleep(0.1)
    raise AssertionError("the cluster did not come back")
