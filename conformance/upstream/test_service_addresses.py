"""API-only checks of Service address allocation (upstream's sig-network e2e: the master service,
NodePort collisions and range, and KEP-1880's IPAddress objects): a Service's cluster IP comes from
a ServiceCIDR and is recorded by an IPAddress naming the Service; node ports are unique and in
range; deleting a Service gives both back. The ranges are read from the cluster, not assumed."""

import ipaddress
import time

import pytest
from kubernetes import client

from util import raw


def node_port_service(name, node_port=None):
    port = client.V1ServicePort(name="http", protocol="TCP", port=80, target_port=8080, node_port=node_port)
    return client.V1Service(metadata=client.V1ObjectMeta(name=name), spec=client.V1ServiceSpec(type="NodePort", selector={"app": name}, ports=[port]))


def service_cidrs(api_client):
    status, _, cidrs = raw(api_client, "GET", "/apis/networking.k8s.io/v1/servicecidrs")
    assert status == 200, cidrs
    return [ipaddress.ip_network(c) for o in cidrs["items"] for c in o["spec"]["cidrs"]]


def ip_address(api_client, ip):
    status, _, obj = raw(api_client, "GET", f"/apis/networking.k8s.io/v1/ipaddresses/{ip}")
    return obj if status == 200 else None


def test_master_service(core, api_client):
    """Services should provide secure master service"""
    svc = core.read_namespaced_service("kubernetes", "default")
    assert [(p.name, p.port, p.protocol) for p in svc.spec.ports] == [("https", 443, "TCP")]
    ip = ipaddress.ip_address(svc.spec.cluster_ip)
    assert any(ip in net for net in service_cidrs(api_client)), f"{ip} outside every ServiceCIDR"
    record = ip_address(api_client, svc.spec.cluster_ip)
    assert record is not None, "the kubernetes Service's address has no IPAddress"
    assert record["spec"]["parentRef"] == {"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"}


def test_cluster_ip_recorded_and_released(core, api_client, ns):
    """ServiceCIDR and IPAddress API: a Service's cluster IP is held by an IPAddress until it goes"""
    created = [core.create_namespaced_service(ns, node_port_service(f"addr-{i}")) for i in range(3)]
    ips = [s.spec.cluster_ip for s in created]
    assert len(set(ips)) == 3, ips
    nets = service_cidrs(api_client)
    for s in created:
        assert any(ipaddress.ip_address(s.spec.cluster_ip) in net for net in nets)
        assert s.spec.ip_families == ["IPv4"] or s.spec.ip_families == ["IPv6"]
        record = ip_address(api_client, s.spec.cluster_ip)
        assert record is not None and record["spec"]["parentRef"]["name"] == s.metadata.name, record
    core.delete_namespaced_service("addr-0", ns)
    deadline = time.monotonic() + 30
    while ip_address(api_client, ips[0]) is not None:
        assert time.monotonic() < deadline, f"{ips[0]} still held after its Service was deleted"
        time.sleep(0.2)


def test_node_port_collision(core, ns):
    """Services should prevent NodePort collisions"""
    first = core.create_namespaced_service(ns, node_port_service("nodeport-collision-1"))
    port = first.spec.ports[0].node_port
    with pytest.raises(client.exceptions.ApiException) as e:
        core.create_namespaced_service(ns, node_port_service("nodeport-collision-2", port))
    assert e.value.status == 422
    assert "provided port is already allocated" in e.value.body
    core.delete_namespaced_service("nodeport-collision-1", ns)
    # The port is free again once the first Service is gone.
    deadline = time.monotonic() + 30
    while True:
        try:
            second = core.create_namespaced_service(ns, node_port_service("nodeport-collision-2", port))
            break
        except client.exceptions.ApiException as retry:
            assert retry.status == 422 and time.monotonic() < deadline, retry.body
            time.sleep(0.2)
    assert second.spec.ports[0].node_port == port


def test_node_port_out_of_range(core, ns):
    """Services should check NodePort out-of-range"""
    with pytest.raises(client.exceptions.ApiException) as e:
        core.create_namespaced_service(ns, node_port_service("nodeport-range", 1))
    assert e.value.status == 422
    assert "provided port is not in the valid range" in e.value.body
