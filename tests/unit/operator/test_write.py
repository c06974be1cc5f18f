"""The write phase performs a decision's writes stage by stage, whatever order it is handed them in."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from mcpg_operator import actions as w
from mcpg_operator.kube import Refused, ns_path
from mcpg_operator.reconcile import write
from mcpg_testing.fake_kube import FakeKube

NS = "shop"


def secret(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}


async def test_writes_are_performed_stage_by_stage_whatever_order_they_come_in() -> None:
    kube = FakeKube()
    kube.set_secret(NS, "old-config")
    todo: list[w.Write] = [
        w.PostEvent({"metadata": {"generateName": "x."}, "reason": "R"}),
        w.MergePatchStatus(w.Ref("resourcewatches", "rw", "mcpg.dev"), {"phase": "Ready"}),
        w.DeleteObject(w.Ref("secrets", "old-config")),
        w.ApplyObject(w.Stage.GATEWAY, w.Ref("deployments", "mcpg-gateway", "apps"), {"metadata": {}}),
        w.ApplyObject(w.Stage.ROTATION_STATE, w.Ref("secrets", "state"), secret("state")),
        w.CreateObject(w.Stage.TOKEN_SECRETS, w.Ref("secrets", "token"), secret("token")),
    ]
    await write.execute(kube, NS, todo)
    # An Event's name is generated (generateName), so only its prefix is known.
    assert [(c.method, re.sub(r"\.\d+$", "", c.path.split(f"/namespaces/{NS}/")[1])) for c in kube.writes] == [
        ("create", "secrets/token"),
        ("apply", "secrets/state"),
        ("apply", "deployments/mcpg-gateway"),
        ("delete", "secrets/old-config"),
        ("merge_patch", "resourcewatches/rw/status"),
        ("create", "events/x"),
    ]


async def test_a_status_is_merge_patched_on_the_status_subresource_and_a_create_never_replaces() -> None:
    kube = FakeKube()
    kube.set_secret(NS, "token", token="mine")
    await write.execute(
        kube,
        NS,
        [
            w.CreateObject(w.Stage.TOKEN_SECRETS, w.Ref("secrets", "token"), secret("token")),
            w.MergePatchStatus(w.Ref("webhooktokens", "t", "mcpg.dev"), {"phase": "Ready"}),
        ],
    )
    assert kube.secret_value(NS, "token", "token") == "mine"
    assert kube.writes[-1].path == f"/apis/mcpg.dev/v1alpha1/namespaces/{NS}/webhooktokens/t/status"
    assert kube.writes[-1].body == {"status": {"phase": "Ready"}}


class CountingKube(FakeKube):
    """A fake that counts the status writes in flight at once, each yielding to the loop before it lands."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.most = 0

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0)  # the round trip: every other write of the stage starts meanwhile
            return await super().merge_patch(path, body)
        finally:
            self.in_flight -= 1


async def test_a_passs_statuses_are_sent_at_once_in_decided_order() -> None:
    kube = CountingKube()
    refs = [w.Ref("resourcewatches", f"rw{i}", "mcpg.dev") for i in range(3)]
    await write.execute(kube, NS, [w.MergePatchStatus(ref, {"phase": "Ready"}) for ref in refs])
    assert kube.most == 3
    assert [c.path.rsplit("/", 2)[1] for c in kube.writes] == ["rw0", "rw1", "rw2"]


async def test_a_failed_status_write_raises_once_every_status_of_the_stage_was_sent() -> None:
    kube = CountingKube()
    refs = [w.Ref("resourcewatches", f"rw{i}", "mcpg.dev") for i in range(3)]
    kube.refuse(ns_path(NS, "resourcewatches", "rw0", group="mcpg.dev"), Refused(422, "Invalid", "refused"))
    with pytest.raises(Refused):
        await write.execute(kube, NS, [w.MergePatchStatus(ref, {"phase": "Ready"}) for ref in refs])
    assert len(kube.writes) == 3
