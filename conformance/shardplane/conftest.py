"""Fixtures for the shardplane checks: the same clients and per-test namespace as the reproduced
upstream checks."""

from conftest_common import api_client, core, ns  # noqa: F401
