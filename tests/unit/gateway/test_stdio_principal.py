"""Who a `--stdio` client acts as: the principal named on the command line if the configuration defines it, else
the anonymous principal if enabled, else a one-line error naming the choices (there is no token on a pipe)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpg_gateway import stdio
from mcpg_gateway.contract import config
from mcpg_testing.configs import principal


def auth(**raw: Any) -> config.AuthConfig:
    return config.AuthConfig.model_validate(raw)


def test_the_named_principal_is_taken_with_its_attributes() -> None:
    chosen = stdio.principal_for(
        auth(principals=[principal("t1", "desk", roles=["reader"]), principal("t2", "ops")]), "desk"
    )

    assert (chosen.principal_id, chosen.roles) == ("desk", ("reader",))


def test_without_a_name_the_anonymous_principal_serves_if_enabled() -> None:
    chosen = stdio.principal_for(auth(anonymous={"enabled": True, "principal_id": "guest"}), None)

    assert chosen.principal_id == "guest"


def test_without_a_name_or_anonymous_access_the_error_names_the_choices() -> None:
    with pytest.raises(stdio.PrincipalError) as refused:
        stdio.principal_for(auth(principals=[principal("t1", "desk"), principal("t2", "ops")]), None)

    assert str(refused.value) == (
        "--stdio acts as one principal: pass --principal NAME (desk, ops), or enable gateway.auth.anonymous"
    )


def test_a_name_the_configuration_does_not_define_is_refused_even_with_anonymous_access() -> None:
    with pytest.raises(stdio.PrincipalError) as refused:
        stdio.principal_for(auth(principals=[principal("t1", "desk")], anonymous={"enabled": True}), "root")

    assert str(refused.value) == "--principal 'root' is not in gateway.auth.principals (desk)"
