"""Speed and memory figures, measured side by side in one run. Run each from the repository root as a module:
``python -m benchmarks.NAME`` (so that it imports the test-only reference code in ``tests/reference/``)."""
