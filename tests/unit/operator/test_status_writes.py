"""A pass writes only what changed: editing one ResourceWatch of many patches that watch's status, not every one.

A watch's status depends on its own entry in the configuration and on whether every available pod serves that
entry, never on the others' edits: with 300 watches edited about 6 times a second, re-patching each status on
every pass cost about 29 patches a second, enough to starve the operator's Lease renewal (issue 31).
"""

from __future__ import annotations

from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import NS, Clock, resourcewatch, run

WATCHES = [f"w{i:02d}" for i in range(12)]


def status_patches(kube: FakeKube) -> list[str]:
    """The ResourceWatches whose status the writes since the last clear patched, in order."""
    return [c.path.split("/")[-2] for c in kube.writes if "/resourcewatches/" in c.path and c.path.endswith("/status")]


async def all_ready(kube: FakeKube, clock: Clock) -> None:
    for name in WATCHES:
        kube.put(resourcewatch(name, token=None))
    await run(kube, clock)
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert all(kube.objects[watch_path(n)]["status"]["conditions"][0]["status"] == "True" for n in WATCHES)


def watch_path(name: str) -> str:
    return f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/resourcewatches/{name}"


async def test_editing_one_watch_of_many_patches_only_that_watchs_status(kube: FakeKube, clock: Clock) -> None:
    await all_ready(kube, clock)
    kube.writes.clear()
    kube.put(resourcewatch("w03", token=None, uri="x://w03-moved"))
    await run(kube, clock)  # the new configuration is applied; every pod still serves the others as they were
    kube.complete_rollout(NS)
    await run(kube, clock)
    assert status_patches(kube) == ["w03", "w03"]  # rolling out, then served


async def test_a_watch_left_as_it_was_stays_ready_while_another_ones_rollout_runs(kube: FakeKube, clock: Clock) -> None:
    await all_ready(kube, clock)
    kube.put(resourcewatch("w03", token=None, uri="x://w03-moved"))
    await run(kube, clock)
    kube.stall_rollout(NS)  # the new pods are not Ready yet: the old ones serve w00 exactly as before
    await run(kube, clock)
    conditions = {c["type"]: c["status"] for c in kube.objects[watch_path("w00")]["status"]["conditions"]}
    edited = {c["type"]: c["status"] for c in kube.objects[watch_path("w03")]["status"]["conditions"]}
    assert (conditions["Ready"], conditions["Reconciling"]) == ("True", "False")
    assert (edited["Ready"], edited["Reconciling"]) == ("False", "True")


async def test_a_pass_that_finds_everything_as_decided_patches_no_status(kube: FakeKube, clock: Clock) -> None:
    await all_ready(kube, clock)
    kube.writes.clear()
    await run(kube, clock)
    assert kube.writes == []
