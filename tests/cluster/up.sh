#!/usr/bin/env bash
# Brings up a real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC, the default
# admission plugins, a service-account signing key) and kube-controller-manager, all upstream
# code built by build.sh. Every connection is TLS with client certificates, every port is bound
# to 127.0.0.1. Alone, it has no kubelet and no scheduler: nothing runs pods.
#
# With DAGPERF_CLUSTER_NODE=real, a real node runs beside it (node.sh: kube-scheduler, a
# kubelet on containerd, bridge CNI, kube-proxy, CoreDNS, local volumes). The pods must reach the
# API server, so it listens on the node's address (its pod bridge's gateway) rather than on
# loopback, every kubeconfig names that address, and the `kubernetes` Service's endpoint is kept
# by the API server's own lease reconciler; the node lifecycle controller runs too.
#
# Prints the path of an admin kubeconfig as its last line of stdout; DIR/bin/kubectl is a kubectl
# of the same release. down.sh stops it all.
#
#   DAGPERF_CLUSTER_DIR  state: certificates, etcd's data, logs, kubeconfigs (default below)
#   DAGPERF_CLUSTER_NODE `real` for a real node (root only); anything else, none (the default)
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null  # start, wait_ready
. "$HERE/../processes.sh"
DIR="${DAGPERF_CLUSTER_DIR:-${TMPDIR:-/tmp}/dagperf-cluster}"
BIN="$("$HERE/build.sh" | tail -1)"
REAL_NODE=""
[ "${DAGPERF_CLUSTER_NODE:-}" = real ] && REAL_NODE=1
# shellcheck source=tests/cluster/node.sh
. "$HERE/node.sh"

"$HERE/down.sh" > /dev/null  # a control plane left behind in this directory goes first
mkdir -p "$DIR"
chmod 700 "$DIR"
cd "$DIR"
rm -rf pki etcd-data bin node ./*.log ./*.kubeconfig
mkdir pki
API_HOST=127.0.0.1 API_SANS="IP:127.0.0.1" RECONCILER=none CONTROLLERS='*,-nodelifecycle'
CONTROLLER_FLAGS=()
if [ -n "$REAL_NODE" ]; then
  node_network
  API_HOST=$NODE_IP API_SANS="IP:$NODE_IP,IP:127.0.0.1" RECONCILER=lease CONTROLLERS='*'
  # The node's pod range, which the node IPAM controller writes into its spec.
  CONTROLLER_FLAGS=(--allocate-node-cidrs --cluster-cidr "$POD_CIDR" --node-cidr-mask-size 24)
fi
ln -s "$BIN" bin  # the components, and a kubectl of the same release

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ETCD_PORT=$(free_port) ETCD_PEER_PORT=$(free_port) API_PORT=$(free_port) KCM_PORT=$(free_port)

# --- certificates: one CA signs the servers' and the clients' certificates ---------------------
openssl_quiet() { openssl "$@" 2> /dev/null; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=dagperf-test-ca" \
  -keyout pki/ca.key -out pki/ca.crt
issue() { # issue NAME SUBJECT [SUBJECT_ALT_NAMES]
  openssl_quiet req -newkey rsa:2048 -nodes -subj "$2" -keyout "pki/$1.key" -out "pki/$1.csr"
  local ext="pki/$1.ext"
  echo "basicConstraints=CA:FALSE" > "$ext"
  if [ -n "${3:-}" ]; then
    echo "subjectAltName=$3" >> "$ext"
    echo "extendedKeyUsage=serverAuth,clientAuth" >> "$ext"
  else
    echo "extendedKeyUsage=clientAuth" >> "$ext"
  fi
  openssl_quiet x509 -req -in "pki/$1.csr" -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial \
    -days 2 -extfile "$ext" -out "pki/$1.crt"
  rm "pki/$1.csr" "$ext"
}
issue etcd "/CN=etcd" "IP:127.0.0.1,DNS:localhost"
issue apiserver "/CN=kube-apiserver" \
  "$API_SANS,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
issue apiserver-etcd "/CN=kube-apiserver-etcd-client"
issue admin "/O=system:masters/CN=dagperf-test-admin"
issue controller-manager "/CN=system:kube-controller-manager" "IP:127.0.0.1,DNS:localhost"
openssl_quiet genrsa -out pki/sa.key 2048
openssl_quiet rsa -in pki/sa.key -pubout -out pki/sa.pub
chmod 600 pki/*.key

kubeconfig() { # kubeconfig USER
  cat > "$1.kubeconfig" << EOF
apiVersion: v1
kind: Config
clusters:
- name: dagperf-test
  cluster: {server: "https://$API_HOST:$API_PORT", certificate-authority: "$DIR/pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$DIR/pki/$1.crt", client-key: "$DIR/pki/$1.key"}
contexts:
- name: dagperf-test
  context: {cluster: dagperf-test, user: $1}
current-context: dagperf-test
EOF
  chmod 600 "$1.kubeconfig"
}
kubeconfig admin
kubeconfig controller-manager
[ -z "$REAL_NODE" ] || node_certificates

probe() { # probe URL CERT: an HTTPS GET with a client certificate of up.sh's CA
  curl -sf --cacert pki/ca.crt --cert "pki/$2.crt" --key "pki/$2.key" "$1"
}

# --- etcd: client certificates required, data that need not survive a crash -----------------
start etcd "$BIN/etcd" --name dagperf-test --data-dir "$DIR/etcd-data" --unsafe-no-fsync \
  --listen-client-urls "https://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "dagperf-test=http://127.0.0.1:$ETCD_PEER_PORT" \
  --listen-metrics-urls "" \
  --client-cert-auth --trusted-ca-file pki/ca.crt --cert-file pki/etcd.crt --key-file pki/etcd.key
wait_ready etcd probe "https://127.0.0.1:$ETCD_PORT/health" apiserver-etcd

# --- kube-apiserver ---------------------------------------------------------------------------
# Without a node, no endpoint reconciler: the `kubernetes` Service cannot have 127.0.0.1 as an
# endpoint. With one, it reaches the kubelets with its own client certificate and checks theirs.
kubelet_client=()
[ -z "$REAL_NODE" ] || kubelet_client=(--kubelet-certificate-authority pki/ca.crt
  --kubelet-client-certificate pki/apiserver-kubelet.crt --kubelet-client-key pki/apiserver-kubelet.key
  --kubelet-preferred-address-types InternalIP)
start kube-apiserver "$BIN/kube-apiserver" \
  --bind-address "$API_HOST" --advertise-address "$API_HOST" --secure-port "$API_PORT" \
  --etcd-servers "https://127.0.0.1:$ETCD_PORT" --etcd-cafile pki/ca.crt \
  --etcd-certfile pki/apiserver-etcd.crt --etcd-keyfile pki/apiserver-etcd.key \
  --tls-cert-file pki/apiserver.crt --tls-private-key-file pki/apiserver.key \
  --client-ca-file pki/ca.crt \
  --authorization-mode Node,RBAC --anonymous-auth=false \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file pki/sa.pub --service-account-signing-key-file pki/sa.key \
  --service-cluster-ip-range 10.96.0.0/24 --endpoint-reconciler-type "$RECONCILER" \
  "${kubelet_client[@]}" --profiling=false
wait_ready kube-apiserver probe "https://$API_HOST:$API_PORT/readyz" admin

# --- kube-controller-manager ------------------------------------------------------------------
# Every default controller (without a real node, but node lifecycle, which has no node to watch);
# each acts under its own service account.
start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig controller-manager.kubeconfig \
  --authentication-kubeconfig controller-manager.kubeconfig \
  --authorization-kubeconfig controller-manager.kubeconfig \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
  --tls-cert-file pki/controller-manager.crt --tls-private-key-file pki/controller-manager.key \
  --client-ca-file pki/ca.crt --root-ca-file pki/ca.crt \
  --service-account-private-key-file pki/sa.key --use-service-account-credentials \
  --controllers "$CONTROLLERS" "${CONTROLLER_FLAGS[@]}" --leader-elect=false --profiling=false
wait_ready kube-controller-manager probe "https://127.0.0.1:$KCM_PORT/healthz" admin

[ -z "$REAL_NODE" ] || node_up

echo "$DIR/admin.kubeconfig"
