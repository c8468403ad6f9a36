"""Shared pytest configuration: Hypothesis profiles.

Select a profile with the HYPOTHESIS_PROFILE environment variable:

- ``dev`` (default): 50 examples per property, for quick local runs;
- ``ci``: 200 examples per property.

Both disable Hypothesis' per-example deadline: the compiled core is fast, but
a loaded CI machine can stall any single example.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# A client of a stopped server gives up after 1 s instead of the default 10
# (tests that measure the window pass reconnect_window themselves).
os.environ.setdefault("FASTREPLAY_RECONNECT_WINDOW", "1")


@pytest.fixture(scope="session")
def ray_session():  # type: ignore[no-untyped-def]
    """One local two-node Ray cluster for the whole session, on loopback with
    usage stats off (skipped when ray is not installed).

    ``ray.cluster_utils.Cluster(connect=True)`` hangs on machines whose
    hostname resolves off loopback (its driver connects to the public
    address), so the head comes from ``ray.init`` and the second node is
    added the way ``Cluster.add_node`` adds one."""
    ray = pytest.importorskip("ray")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    ctx = ray.init(_node_ip_address="127.0.0.1", num_cpus=2, include_dashboard=False,
                   log_to_driver=False, configure_logging=False)
    params = RayParams(gcs_address=ctx.address_info["gcs_address"],
                       node_ip_address="127.0.0.1", num_cpus=2,
                       include_log_monitor=False, node_manager_port=0,
                       object_store_memory=150 << 20, min_worker_port=0,
                       max_worker_port=0)
    params.dashboard_agent_listen_port = None
    node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    try:
        import time
        deadline = time.monotonic() + 60
        while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
            assert time.monotonic() < deadline, "the second Ray node did not start"
            time.sleep(0.1)
        yield ray
    finally:
        ray.shutdown()
        node.kill_all_processes(check_alive=False, allow_graceful=True)


@pytest.fixture(params=["fastreplay", "upstream"])
def impl(request):  # type: ignore[no-untyped-def]
    """The rlightning Storage implementations (tests/_rlightning_impls.py):
    fastreplay's adapter, and upstream's only when FR_RLIGHTNING_UPSTREAM=1
    (otherwise that case is deselected below, not skipped)."""
    from _rlightning_impls import load_impl

    return load_impl(request.param)


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Without FR_RLIGHTNING_UPSTREAM=1 the upstream half of the shared
    rlightning tests is deselected (CI has no upstream to compare with)."""
    if os.environ.get("FR_RLIGHTNING_UPSTREAM") == "1":
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (drop if params.get("impl") == "upstream" else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
