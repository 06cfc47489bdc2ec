"""The source distribution holds everything its build needs.

``pip install .`` builds from the clone, but an sdist (``python -m build``, a package index) is
built from what maturin packed: it packs the crate and its path dependencies, not the crates
Cargo.toml's ``[patch.crates-io]`` puts in place of a release (the vendored zune-jpeg). Without
them in ``[tool.maturin] include``, the sdist does not build.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_patched_crate_is_packed_into_the_sdist():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = [
        g["path"]
        for g in pyproject["tool"]["maturin"].get("include", [])
        if isinstance(g, dict) and g.get("format") in ("sdist", ["sdist"])
    ]
    patched = [
        dep["path"]
        for source in cargo.get("patch", {}).values()
        for dep in source.values()
        if "path" in dep
    ]
    assert patched, "Cargo.toml patches no crate with a local copy any more: drop this test"
    for path in patched:
        files = [f for f in (ROOT / path).rglob("*") if f.is_file()]
        assert files, f"{path} holds no files"
        for file in files:
            rel = file.relative_to(ROOT).as_posix()
            # fnmatch's * crosses "/", as maturin's ** does.
            assert any(fnmatch.fnmatch(rel, g) for g in globs), (
                f"{rel} is not in the sdist: add it to pyproject.toml's [tool.maturin] include"
            )
