"""The signed-webhooks guide shows each signature scheme's sender exactly as `examples/senders/` holds it (which the
integration tier runs against the gateway, and `hack/reference.py` copies into docs/reference.md): a copy-paste that
works."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from mcpg_gateway.contract import signing

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("scheme", typing.get_args(signing.Scheme))
def test_the_guide_and_the_reference_show_each_schemes_sender_as_the_tested_script(scheme: str) -> None:
    script = (ROOT / "examples" / "senders" / f"{scheme}.sh").read_text().rstrip()
    block = f"```sh\n{script}\n```"
    assert block in (ROOT / "docs" / "guides" / "signed-webhooks.md").read_text()
    assert block in (ROOT / "docs" / "reference.md").read_text()


def test_every_script_in_the_senders_folder_is_a_scheme() -> None:
    names = {p.stem for p in (ROOT / "examples" / "senders").glob("*.sh")}
    assert names == set(typing.get_args(signing.Scheme))
