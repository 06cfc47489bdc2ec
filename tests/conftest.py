"""Shared test setup: eight simulated devices, hypothesis profiles, local storage servers.

``fast`` (default) keeps the suite quick; ``JAXREC_HYPOTHESIS_PROFILE=slow`` explores more.
"""

import os

# Eight CPU devices, like a TPU v4-8 slice, for the sharding tests; set before jax is imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("fast", max_examples=50, deadline=None)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("JAXREC_HYPOTHESIS_PROFILE", "fast"))

# Storage servers on 127.0.0.1 for the remote tests: http_store, s3, no_network.
pytest_plugins = ["storage_servers"]
