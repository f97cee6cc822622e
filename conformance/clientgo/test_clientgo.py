"""client-go 0.32 (Debian's golang-k8s-client-go-dev, built here in GOPATH mode) against the
endpoint KUBECONFIG names: typed clients write with protobuf while a SharedInformer follows, by
LIST then WATCH and by WatchList (client-go's WatchListClient feature gate). See main.go."""

import os
import subprocess
import uuid

import pytest



@pytest.mark.parametrize("watchlist", ["false", "true"], ids=["list-watch", "watchlist"])
def test_informer_sees_every_acknowledged_write_and_ends_equal_to_a_list(binary, watchlist):
    ns = f"clientgo-informer-{uuid.uuid4().hex[:5]}"
    env = {**os.environ, "KUBE_FEATURE_WatchListClient": watchlist}
    out = subprocess.run([str(binary), os.environ["KUBECONFIG"], ns], env=env, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"writes":' in out.stdout
