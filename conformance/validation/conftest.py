"""Fixtures for the validation suite: the raw HTTP client (`conftest_common.Raw`), so that each
invalid object goes out exactly as written, and a namespace per test."""

import pytest
from conftest_common import Raw, api_client, core, ns  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="session")
def raw(api_client):
    return Raw(api_client.configuration)
