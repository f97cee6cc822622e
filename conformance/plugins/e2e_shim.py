"""The `kubernetes.e2e_test.base` module that the tests shipped in the PyPI `kubernetes` wheel
import (it lives in the client's repository, not in the wheel): `get_e2e_configuration()` loads
the cluster KUBECONFIG names. Registered in sys.modules before the tests are imported."""

import os
import sys
import types

from kubernetes import client, config


def get_e2e_configuration():
    c = client.Configuration()
    config.load_kube_config(config_file=os.environ["KUBECONFIG"], client_configuration=c)
    return c


package = types.ModuleType("kubernetes.e2e_test")
package.__path__ = []
base = types.ModuleType("kubernetes.e2e_test.base")
base.get_e2e_configuration = get_e2e_configuration
package.base = base
sys.modules.setdefault("kubernetes.e2e_test", package)
sys.modules.setdefault("kubernetes.e2e_test.base", base)
