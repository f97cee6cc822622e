"""Fixtures for the reproduced upstream checks: API clients for the cluster KUBECONFIG names, and
a fresh namespace per test (`<basename>-<random>`, deleted afterwards), as the e2e framework."""

import os
import uuid

import pytest
from kubernetes import client, config


@pytest.fixture(scope="session")
def api_client():
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    return client.ApiClient()


@pytest.fixture(scope="session")
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture
def ns(core, request):
    base = request.node.name.split("[")[0].replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    try:
        core.delete_namespace(name)
    except client.exceptions.ApiException:
        pass
