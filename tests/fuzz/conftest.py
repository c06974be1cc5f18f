"""The fuzz tier: Hypothesis properties of everything that takes hostile text.

Every test here states a property (expansion never leaves its segment, normalisation is idempotent, any input
gives a value or an error naming the field) and lets Hypothesis search for a counterexample. How long it
searches is a profile, not a per-test setting, so one switch bounds the whole tier:

- `quick` (the default): a few dozen examples each, so `pytest tests/fuzz` stays a seconds-long edit loop;
- `long` (`MCPG_FUZZ_PROFILE=long`, what `make test-fuzz` and so CI run): thousands each.

Tests in this folder do not set `max_examples` themselves; a failure prints the `@reproduce_failure` blob.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("quick", max_examples=60, deadline=None)
settings.register_profile(
    "long",
    max_examples=2_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("MCPG_FUZZ_PROFILE", "quick"))
