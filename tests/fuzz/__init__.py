"""A mutation fuzzer for jaxrec's native entry points, run in a watched child process.

``corpus`` builds the seeds (the golden files of ``tests/data`` and small generated records,
images and tensors, each with specs that read them); ``mutate`` changes them at the byte level
and structurally (protobuf trees with lengths recomputed, TFRecord frames with CRCs recomputed,
image headers); ``targets`` runs one case against an entry point (the reader, the parsers,
``parse_tensor``, ``decode_image``, the CLI, the Loader) and writes one-line reproducers;
``child`` is the process that runs them and ``harness`` the parent that watches it for
uncaught exceptions, panics, aborts, signals, hangs and memory growth.

Run ``make fuzz`` (or ``PYTHONPATH=tests python -m fuzz --help``) for a long campaign;
``tests/fuzz/test_fuzz.py`` runs a short deterministic one with the test suite.
"""

from .harness import Campaign, Finding, Options, Report

__all__ = ["Campaign", "Finding", "Options", "Report"]
