"""Shared test setup: eight simulated devices, hypothesis profiles, TensorFlow's tf.train
classes, local storage servers.

``fast`` (default) keeps the suite quick; ``JAXREC_HYPOTHESIS_PROFILE=slow`` explores more.
"""

import json
import os
from pathlib import Path
from types import SimpleNamespace

# Eight CPU devices, like a TPU v4-8 slice, for the sharding tests; set before jax is imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import pytest  # noqa: E402
from google.protobuf import descriptor_pool, message_factory  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("fast", max_examples=50, deadline=None)
settings.register_profile(
    "slow", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("JAXREC_HYPOTHESIS_PROFILE", "fast"))

# Storage servers on 127.0.0.1 for the remote tests: http_store, s3, no_network.
pytest_plugins = ["storage_servers"]

GOLDEN_PROTO = Path(__file__).resolve().parent / "data" / "golden_proto"


@pytest.fixture(scope="session")
def golden_proto() -> dict:
    """tests/data/golden_proto/manifest.json: tf.train's schema and messages, by TensorFlow.

    Written by ``scripts/make_golden.py --only proto`` with tensorflow-cpu; see
    tests/data/README.md.
    """
    return json.loads((GOLDEN_PROTO / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def golden_tf_train(golden_proto: dict) -> SimpleNamespace:
    """TensorFlow's ``tf.train`` classes, without TensorFlow.

    Built as TF's generated ``feature_pb2`` / ``example_pb2`` modules build them: the same
    serialized FileDescriptorProtos (golden files) added to a descriptor pool, one class per
    message. The pool is a fresh one, so these are messages of another pool with the same full
    names as jaxrec's, like ``tf.train``'s in a process that imported TensorFlow.
    """
    pool = descriptor_pool.DescriptorPool()
    for f in golden_proto["files"]:  # in dependency order
        pool.AddSerializedFile((GOLDEN_PROTO / f["binpb"]).read_bytes())
    return SimpleNamespace(
        **{
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(c["full_name"]))
            for name, c in golden_proto["classes"].items()
        }
    )


@pytest.fixture(scope="session", params=["golden", "tensorflow"])
def tf_train(request: pytest.FixtureRequest, golden_tf_train: SimpleNamespace):
    """``tf.train`` for the TensorFlow cross-checks, twice.

    ``golden``: rebuilt from the golden files, always run. ``tensorflow``: TensorFlow's own
    module, run when it is installed and skipped otherwise.
    """
    if request.param == "golden":
        return golden_tf_train
    tf = pytest.importorskip(
        "tensorflow", reason="live TensorFlow variant; the golden variant ran without it"
    )
    return tf.train
