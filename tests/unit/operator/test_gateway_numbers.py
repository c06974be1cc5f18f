"""The operator passes on only numbers a gateway can use: finite, and within the gateway's own bounds.

Python's JSON parser takes `NaN` and `Infinity` (and reads `1e400` as infinite), so a gateway setting given as JSON
(`MCPG_GATEWAY_SUBSCRIPTIONS` and the rest) could carry a value no gateway can run on, and no Kubernetes object
rendered from it can hold. A ResourceWatch's poll interval has the gateway's bound in both the CRD and the model.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from mcpg_gateway.contract import config
from mcpg_operator import models, settings
from mcpg_testing.manifests import crd_schema

POD = {"POD_NAMESPACE": "ops", "POD_NAME": "mcpg-operator-7d9f-x2x4k"}


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("MCPG_GATEWAY_SUBSCRIPTIONS", '{"idle_after_s": Infinity}', "Infinity is not a JSON value"),
        ("MCPG_GATEWAY_SUBSCRIPTIONS", '{"lifetime_s": NaN}', "NaN is not a JSON value"),
        ("MCPG_GATEWAY_LIMITS", '{"header_timeout_s": 1e400}', "1e400 is not a finite number"),
        ("MCPG_GATEWAY_RESOURCES", '{"limits": {"cpu": -Infinity}}', "-Infinity is not a JSON value"),
    ],
)
def test_a_setting_whose_json_holds_a_number_that_is_not_finite_is_refused_naming_the_variable(
    variable: str, value: str, why: str
) -> None:
    with pytest.raises(settings.SettingsError) as refused:
        settings.load({**POD, variable: value})
    assert str(refused.value) == f"{variable}: not valid JSON ({why}): {value!r}"


def test_a_subscription_setting_past_the_gateways_bound_is_refused_naming_the_key() -> None:
    with pytest.raises(settings.SettingsError) as refused:
        settings.load({**POD, "MCPG_GATEWAY_SUBSCRIPTIONS": '{"idle_after_s": 1e300}'})
    assert str(refused.value) == (
        f"MCPG_GATEWAY_SUBSCRIPTIONS: idle_after_s: Input should be less than or equal to {config.LONGEST_S}"
    )


SPEC = {"uri": "x://a", "backend": {"http": {"url": "http://u/"}}}


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [("poll", {}), ("sqlPolling", {"query": "select 1", "urlSecretRef": {"name": "s", "key": "k"}})],
)
def test_a_poll_interval_past_the_gateways_bound_is_refused_by_the_crd_and_the_model(
    strategy: str, extra: dict[str, Any]
) -> None:
    def spec(interval_ms: int) -> dict[str, Any]:
        return {**SPEC, "watch": {strategy: {"intervalMs": interval_ms, **extra}}}

    models.ResourceWatchSpec.model_validate(spec(config.LONGEST_MS))
    jsonschema.validate({"spec": spec(config.LONGEST_MS)}, crd_schema("ResourceWatch"))
    with pytest.raises(ValueError, match="less than or equal to 31536000000"):
        models.ResourceWatchSpec.model_validate(spec(config.LONGEST_MS + 1))
    with pytest.raises(jsonschema.ValidationError, match="is greater than the maximum"):
        jsonschema.validate({"spec": spec(config.LONGEST_MS + 1)}, crd_schema("ResourceWatch"))
