"""Fixtures and writers the tests share: published file layouts, synthetic voices, parity harnesses."""


