"""The CRD refuses the backend urls and methods the gateway refuses, in the rules the API server runs.

The rules are read from the generated CRD in crds/ and evaluated with cel-cpp (the gateway's CEL engine, RE2
regular expressions and the strings extension, as Kubernetes' cel-go has them); the API server itself runs them in
tests/e2e/test_operator.py::test_the_api_server_rejects_what_can_never_work.
"""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel  # type: ignore[import-untyped]
from pydantic import ValidationError

from mcpg_gateway.contract import backend_urls
from mcpg_operator import conditions as c
from mcpg_operator import models, observed, render
from mcpg_operator.settings import GatewayDefaults
from mcpg_testing.manifests import crd

URLS = [
    "https://api.example.com/files/{id}",
    "http://u",
    "HTTPS://API.example.com:8443/x?q={q}",
    "https://user:pass@api.example.com/x",
    "http://[::1]:8080/x",
    "api.example.com/x",
    "ftp://x/y",
    "http:///path",
    "http://:80/",
    "https://u@/x",
    "https://{host}/x",
    "https://h:{port}/x",
    "https://{u}@h/x",
    "https://a@b@c/x",
    "http://h}/x",
    "",
]
METHODS = ["get", "GET", "Get", "pOsT", "put", "PATCH", "delete", "Head", "fetch", "GETS", ""]


def http_node(field: str) -> dict[str, Any]:
    spec = crd("ResourceWatch")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node: dict[str, Any] = spec["properties"]["backend"]["properties"]["http"]["properties"][field]
    return node


def crd_accepts(field: str, value: str) -> bool:
    env = cel.NewEnv(
        config=cel.NewEnvConfigFromYaml("extensions:\n  - name: strings\n"), variables={"self": cel.Type.STRING}
    )
    rules = [env.compile(rule["rule"]) for rule in http_node(field)["x-kubernetes-validations"]]
    return all(rule.eval(data={"self": value}).value() is True for rule in rules)


def model_accepts(field: str, value: str) -> bool:
    try:
        models.HttpBackendSpec.model_validate({"url": "http://u", field: value})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("url", URLS)
def test_the_crd_rule_and_the_gateway_agree_on_a_backend_url(url: str) -> None:
    assert crd_accepts("url", url) == (backend_urls.problem(url) is None) == model_accepts("url", url)


@pytest.mark.parametrize("method", METHODS)
def test_the_crd_rule_and_the_model_agree_on_a_method_in_any_case(method: str) -> None:
    assert (
        crd_accepts("method", method)
        == model_accepts("method", method)
        == (method.lower() in ("get", "post", "put", "patch", "delete", "head"))
    )


def test_the_crd_checks_a_method_by_rule_not_by_a_case_sensitive_enum() -> None:
    assert "enum" not in http_node("method")


def test_the_model_renders_a_method_as_the_gateway_spells_it() -> None:
    assert models.HttpBackendSpec.model_validate({"url": "http://u", "method": "POST"}).method == "post"


def stored(url: str, method: str = "get") -> observed.Watch:
    """A ResourceWatch as the API server may hold it: stored before its CRD carried these rules."""
    spec = {"uri": "x://a", "backend": {"http": {"url": url, "method": method}}}
    return observed.Watch(observed.Identity("mcpg.dev/v1alpha1", "ResourceWatch", "w", "uid-w", 1, "t"), spec, {})


@pytest.mark.parametrize("url", ["api.example.com/x", "ftp://x/y", "https://{host}/x"])
def test_a_stored_watch_with_such_a_url_is_not_served_and_says_which_field(url: str) -> None:
    verdict = render.plan([stored(url)], {}, {}, GatewayDefaults()).verdicts["w"]
    assert (verdict.served, verdict.reason, verdict.stalled) == (False, c.INVALID_SPEC, True)
    assert verdict.message.startswith("spec.backend.http.url: ")


def test_a_stored_watch_with_a_capitalised_method_renders_it_as_the_gateway_spells_it() -> None:
    plan = render.plan([stored("https://api.example.com/x", "GET")], {}, {}, GatewayDefaults())
    assert plan.verdicts["w"].served
    assert plan.config["mcp"]["capabilities"]["resources"][0]["backend"]["method"] == "get"
