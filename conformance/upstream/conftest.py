"""Fixtures for the reproduced upstream checks (defined in conftest_common, shared with the
shardplane checks)."""

from conftest_common import api_client, core, ns  # noqa: F401
