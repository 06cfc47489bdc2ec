"""Shared test setup: hypothesis profiles.

``fast`` (default) keeps the suite quick; ``JAXREC_HYPOTHESIS_PROFILE=slow`` explores more.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=50, deadline=None)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("JAXREC_HYPOTHESIS_PROFILE", "fast"))
