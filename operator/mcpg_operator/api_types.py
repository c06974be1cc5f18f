"""The Kubernetes value types the CRDs' fields are made of: object names, Secret keys, sized integers, instants.

Each is an Annotated type: the validator the operator trusts, and the same rule as the CRD states it (a
`schema_markers.Schema`), so both sources of truth refuse one name alike (tests/unit/operator/test_api.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator

from mcpg_operator import schema_markers as sm

# The API server's own rules for what these fields name, as patterns in the CRDs (tests/unit/operator/test_api.py
# checks that every reference there carries exactly these). A name the API server would refuse must be refused
# here too: the operator writes the Secret a WebhookToken names, and a refused write would fail the namespace's
# every reconcile instead of this one object.
NAME_MAX = 253
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (DNS-1123 subdomain): what a Secret or a WebhookToken may be called."""
DATA_KEY_PATTERN = r"^([-_a-zA-Z0-9]|\.[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$"
"""A Secret data key: `[-._a-zA-Z0-9]+`, and neither `.` nor `..` nor anything starting with `..`."""


def _matching(pattern: str, what: str) -> Callable[[str], str]:
    """A validator: the whole value matches `pattern` and has at most NAME_MAX characters, or `what` is said."""

    def check(value: str) -> str:
        # fullmatch, as the API server's RE2 does: Python's `$` alone would let a trailing newline through.
        if len(value) > NAME_MAX or not re.fullmatch(pattern, value):
            raise ValueError(f"must be {what}")
        return value

    return check


# The CRD states the same rule as a pattern and lengths; the validator is what the operator trusts (RE2's fullmatch).
ObjectName = Annotated[
    str,
    sm.Schema(minLength=1, maxLength=NAME_MAX, pattern=OBJECT_NAME_PATTERN),
    AfterValidator(
        _matching(
            OBJECT_NAME_PATTERN,
            f"a Kubernetes object name: at most {NAME_MAX} lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
        )
    ),
]
DataKey = Annotated[
    str,
    sm.Schema(minLength=1, maxLength=NAME_MAX, pattern=DATA_KEY_PATTERN),
    AfterValidator(
        _matching(
            DATA_KEY_PATTERN,
            f"a Secret key: at most {NAME_MAX} letters, digits, '-', '_' and '.', and not '.', '..' or starting "
            "with '..'",
        )
    ),
]


Int32 = Annotated[int, sm.Schema(format="int32")]
Int64 = Annotated[int, sm.Schema(format="int64")]
Timestamp = Annotated[str, sm.Schema(format="date-time")]
"""An instant as RFC 3339 text, as the operator writes it."""
