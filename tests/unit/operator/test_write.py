"""The write phase performs a decision's writes stage by stage, whatever order it is handed them in."""

from __future__ import annotations

import re

from mcpg_operator import actions as w
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
