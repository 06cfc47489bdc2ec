import importlib.metadata

import jaxrec as jr
from jaxrec import _native


def test_the_version_is_written_once():
    # Cargo.toml's version, compiled into the native module and read by maturin for the
    # package metadata (pyproject.toml declares it dynamic).
    assert jr.__version__ == _native.__version__ == importlib.metadata.version("jaxrec")
