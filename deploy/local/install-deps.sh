#!/usr/bin/env bash
# Installs what shardplane's tests need on Debian 12 (bookworm). The build itself needs only a
# Rust toolchain: etcd's .proto files are compiled by protox, in Rust (RFC 0009). This installs:
#   - etcd 3.5 from Debian trixie, extracted into .tools/etcd (bookworm's 3.4.23 answers
#     on-demand progress requests too early: etcd#15220; see RFCS/0001)
#   - Go 1.24 and client-go 0.32 from Debian trixie, to build the client-go test client
#     (crates/testkit/tests/clientgo), which sends protobuf bodies as every Go controller does
#   - fonts-dejavu-core: the font the benchmarks' plots are drawn with
#   - iproute2: the multi-host test's hosts are network namespaces (`ip netns`, RFC 0016)
#   - systemd: `systemd-analyze verify` checks the units in deploy/systemd (not run: verified only)
#   - python3 + the PyPI `kubernetes` and `kr8s` clients and pytest, for the client tests and the
#     conformance suite (optional: PY_CLIENT=0 skips)
# Idempotent: a second run does nothing that is already done.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/.tools"
mkdir -p "$tools"

need_apt_update=1
apt_update_once() {
  if [ "$need_apt_update" = 1 ]; then
    apt-get update -qq
    need_apt_update=0
  fi
}

if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  apt_update_once
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fonts-dejavu-core >/dev/null
fi

if ! command -v ip >/dev/null; then
  apt_update_once
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
fi

if ! command -v systemd-analyze >/dev/null; then
  apt_update_once
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi

etcd_bin="$tools/etcd/usr/bin/etcd"
if [ ! -x "$etcd_bin" ]; then
  if [ ! -f /etc/apt/sources.list.d/trixie.sources ]; then
    cat > /etc/apt/sources.list.d/trixie.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat > /etc/apt/preferences.d/trixie-low <<'PIN'
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
    need_apt_update=1
  fi
  apt_update_once
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq etcd-server/trixie >/dev/null)
  dpkg -x "$tmp"/etcd-server_*.deb "$tools/etcd"
  rm -rf "$tmp"
fi
# The first line only, read to the end (`head -1` would close the pipe early: etcd then dies of
# SIGPIPE, and under pipefail so does this script).
"$etcd_bin" --version | sed -n 1p

if [ ! -x /usr/lib/go-1.24/bin/go ] || [ ! -d /usr/share/gocode/src/k8s.io/client-go ]; then
  apt_update_once
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t trixie golang-1.24-go golang-k8s-client-go-dev >/dev/null
fi

if [ "${PY_CLIENT:-1}" = 1 ]; then
  # The PyPI clients and test runner of the client tests and the conformance suite.
  if ! python3 -c 'import kubernetes, kr8s, pytest, pytest_asyncio, pytest_timeout, pytest_rerunfailures' >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check 'kubernetes==37.0.2' 'kr8s==0.20.15' 'pytest==8.3.4' 'pytest-asyncio==0.24.0' 'pytest-timeout==2.3.1' 'pytest-rerunfailures==15.0' >/dev/null
  fi
fi
echo "deps ok: etcd at $etcd_bin"
