"""Test-only transcriptions of reference implementations (their maths, not their code paths), for parity tests and benchmarks."""
