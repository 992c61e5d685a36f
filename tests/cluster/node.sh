# shellcheck shell=bash
# A real single node beside up.sh's control plane, sourced by up.sh and down.sh when
# DAGPERF_CLUSTER_NODE=real: kube-scheduler, containerd with runc, a kubelet, bridge CNI, kube-proxy
# in iptables mode, CoreDNS for cluster.local and a default StorageClass whose claims Rancher's
# local-path-provisioner (kind's default storage) binds to local volumes it makes, all built by
# build.sh (runc is Debian's). Each part runs as a host process under DIR, as Kubernetes'
# hack/local-up-cluster.sh runs them, logged and stopped like the control plane's.
#
# The node's address is the gateway of its pod bridge: up.sh creates the bridge first
# (node_network) so that the API server can listen there, the one address the pods reach it on
# (through the `kubernetes` Service, which kube-proxy routes to it); nothing listens on 0.0.0.0.
# The bridge, the address range and the node's name are fixed, so one real node runs on a machine
# at a time.
#
# What the node changes outside DIR, and node_down undoes: the bridge (with the route of the
# Service range) and the pods' veths, network namespaces (under containerd's state dir),
# kube-proxy's and the kubelet's iptables chains (all named KUBE-*) and the nftables tables
# iptables-nft made for them (deleted with Debian's nft), the kubepods cgroups, the HOST_DIRS
# below if it made them, and net.ipv4.ip_forward, which the bridge plugin turns on for the pods'
# traffic through the host (set back to what it was).

NODE_NAME=dagperf-node
NODE_BRIDGE=dagperf0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24 # up.sh's --service-cluster-ip-range
CLUSTER_DOMAIN=cluster.local
PAUSE_IMAGE=localhost/dagperf-pause:1
NODE_IMAGES=("localhost/dagperf:0.1.0") # imported from podman, never pulled
# Where the parts keep state whatever they are told (the shims' sockets and runc's state, the
# CNI library's cache, the kubelet's device plugins): node_down removes what the node made there.
HOST_DIRS=(/run/containerd /var/lib/cni /var/lib/kubelet)

node_network() { # the node's bridge and address, before anything listens on it
  if ip link show "$NODE_BRIDGE" > /dev/null 2>&1; then
    echo "node.sh: $NODE_BRIDGE exists: another real node is up on this machine" >&2
    exit 1
  fi
  mkdir -p "$DIR/node" # down.sh looks for it
  cat /proc/sys/net/ipv4/ip_forward > "$DIR/node/ip_forward.before"
  node_tables > "$DIR/node/tables.before"
  local made
  for made in "${HOST_DIRS[@]}"; do [ -e "$made" ] || echo "$made"; done > "$DIR/node/host-dirs.made"
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # The Service range on the bridge too: a packet to a cluster IP that kube-proxy has no rule for
  # yet stays on this machine instead of following the default route out.
  ip route add "$SERVICE_CIDR" dev "$NODE_BRIDGE"
}

node_certificates() {
  issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  issue kubelet-serving "/CN=$NODE_NAME" "IP:$NODE_IP,DNS:$NODE_NAME"
  issue apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
  issue kube-scheduler "/CN=system:kube-scheduler" "IP:127.0.0.1,DNS:localhost"
  issue kube-proxy "/CN=system:kube-proxy"
  issue coredns "/CN=dagperf:coredns"
  issue local-path "/CN=dagperf:local-path-provisioner"
  chmod 600 pki/*.key
  local user
  for user in kubelet kube-scheduler kube-proxy coredns local-path; do kubeconfig "$user"; done
}

node_up() {
  local started=$SECONDS kubectl=("$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig")
  mkdir -p node/cni/net.d node/volumes node/pod-logs node/kubelet node/containerd

  # --- kube-scheduler -------------------------------------------------------------------------
  local scheduler_port
  scheduler_port=$(free_port)
  cat > node/kube-scheduler.yaml << EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$DIR/kube-scheduler.kubeconfig"}
leaderElection: {leaderElect: false}
EOF
  start kube-scheduler "$BIN/kube-scheduler" --config node/kube-scheduler.yaml \
    --authentication-kubeconfig kube-scheduler.kubeconfig \
    --authorization-kubeconfig kube-scheduler.kubeconfig \
    --bind-address 127.0.0.1 --secure-port "$scheduler_port" \
    --tls-cert-file pki/kube-scheduler.crt --tls-private-key-file pki/kube-scheduler.key \
    --client-ca-file pki/ca.crt --profiling=false

  # --- containerd: its own root, state and socket; runc with cgroupfs; CNI from DIR ----------
  # The pods' network namespaces are mounted under its state dir, not /var/run/netns. The CRI
  # stream server (exec, logs) listens on loopback; NRI and the tracing plugins are off.
  local sock="$DIR/node/containerd/containerd.sock"
  cat > node/containerd/config.toml << EOF
version = 3
root = "$DIR/node/containerd/root"
state = "$DIR/node/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$BIN/cni"]
    conf_dir = "$DIR/node/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
  # The OOM score: this machine's root lacks CAP_SYS_RESOURCE, so runc cannot lower a process's
  # oom_score_adj below containerd's own (a pod sandbox asks for -998, Guaranteed pods' containers
  # for -997; runc failed with "can't get final child's PID from pipe: EOF"): containerd raises
  # them to its own instead, as it does for rootless nodes.
  # Bridge CNI with host-local addresses from the pod range; no masquerading (nothing leaves the
  # machine) and no portmap (no pod asks for a host port, and its chains would be shared with
  # podman's).
  cat > node/cni/net.d/10-dagperf.conflist << EOF
{
  "cniVersion": "1.0.0",
  "name": "dagperf",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$DIR/node/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  start containerd env PATH="$BIN:$PATH" "$BIN/containerd" --config node/containerd/config.toml
  wait_ready containerd "$BIN/ctr" --address "$sock" version
  node_images "$sock"

  # --- kubelet --------------------------------------------------------------------------------
  local kubelet_port healthz_port
  kubelet_port=$(free_port) healthz_port=$(free_port)
  cat > node/kubelet.yaml << EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$NODE_IP"
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
tlsCertFile: "$DIR/pki/kubelet-serving.crt"
tlsPrivateKeyFile: "$DIR/pki/kubelet-serving.key"
rotateCertificates: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$DIR/pki/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$sock"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: true
clusterDNS: ["$NODE_IP"]
clusterDomain: "$CLUSTER_DOMAIN"
resolvConf: ""
podCIDR: "$POD_CIDR"
podLogsDir: "$DIR/node/pod-logs"
staticPodPath: ""
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start kubelet "$BIN/kubelet" --config node/kubelet.yaml --kubeconfig kubelet.kubeconfig \
    --root-dir "$DIR/node/kubelet" --node-ip "$NODE_IP" --hostname-override "$NODE_NAME"
  wait_ready kubelet curl -sf "http://127.0.0.1:$healthz_port/healthz"

  # --- kube-proxy: iptables, node ports only on the node's address (none on loopback) ---------
  local proxy_healthz proxy_metrics
  proxy_healthz=$(free_port) proxy_metrics=$(free_port)
  cat > node/kube-proxy.yaml << EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$DIR/kube-proxy.kubeconfig"}
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
mode: iptables
clusterCIDR: $POD_CIDR
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$BIN/kube-proxy" --config node/kube-proxy.yaml
  wait_ready kube-proxy curl -sf "http://127.0.0.1:$proxy_healthz/healthz"

  # --- cluster objects: CoreDNS's and the provisioner's access, the storage class --------------
  node_objects | "${kubectl[@]}" apply -f - > /dev/null

  # --- local-path-provisioner: a host process; each claim's directory under node/volumes is
  # made (and removed with its volume) by a helper pod it runs, from the project's image ---------
  start local-path "$BIN/local-path-provisioner" start --kubeconfig local-path.kubeconfig \
    --namespace local-path-storage --provisioner-name rancher.io/local-path \
    --service-account-name local-path-provisioner

  # --- CoreDNS: a host process on the node's address, the kubelet's clusterDNS ----------------
  local dns_ready
  dns_ready=$(free_port)
  cat > node/Corefile << EOF
$CLUSTER_DOMAIN:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $NODE_IP
    errors
    ready 127.0.0.1:$dns_ready
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $DIR/coredns.kubeconfig dagperf-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF
  start coredns "$BIN/coredns" -conf node/Corefile
  wait_ready coredns curl -sf "http://127.0.0.1:$dns_ready/ready"
  wait_ready kube-scheduler probe "https://127.0.0.1:$scheduler_port/healthz" admin

  if ! "${kubectl[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s > /dev/null; then
    echo "node.sh: $NODE_NAME was not Ready in 120 s; the end of $DIR/kubelet.log:" >&2
    tail -20 kubelet.log >&2
    exit 1
  fi
  echo "node.sh: $NODE_NAME Ready in $((SECONDS - started)) s" >&2
}

node_images() { # node_images SOCKET: the pause image made here, the project's from podman
  local ctr=("$BIN/ctr" --address "$1" -n k8s.io) image staged=node/images
  mkdir -p "$staged/pause/rootfs"
  cp "$BIN/pause" "$staged/pause/rootfs/pause"
  tar -C "$staged/pause/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$staged/pause/layer.tar" pause
  printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$(sha256sum "$staged/pause/layer.tar" | cut -d' ' -f1)" > "$staged/pause/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$PAUSE_IMAGE" \
    > "$staged/pause/manifest.json"
  tar -C "$staged/pause" -cf "$staged/pause.tar" manifest.json config.json layer.tar
  # (ctr warns on stderr that containerd deprecates cgroup v1)
  "${ctr[@]}" images import --platform linux/amd64 "$staged/pause.tar" >> images.log 2>&1
  for image in "${NODE_IMAGES[@]}"; do
    if podman image exists "$image"; then
      podman save --quiet --format docker-archive -o "$staged/image.tar" "$image"
      "${ctr[@]}" images import --platform linux/amd64 "$staged/image.tar" >> images.log 2>&1
      rm "$staged/image.tar"
      # Also under the name a short `dagperf:0.1.0` means to the kubelet (Docker Hub's library),
      # which the chart and the examples use, as `kind load docker-image` leaves it.
      "${ctr[@]}" images tag --force "$image" "docker.io/library/${image#localhost/}" >> images.log
    else
      echo "node.sh: $image is not in podman's store (tests/image/build.sh builds it); not imported" >&2
    fi
  done
  rm -rf "$staged"
}

node_objects() { # what the node's parts need in the API, as YAML
  cat << EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "dagperf:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "dagperf:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "dagperf:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "dagperf:coredns"}]
---
# The provisioner's rules as its own manifest grants them (deploy/local-path-storage.yaml), to its
# certificate's user rather than a service account; the service account is its helper pods'.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "dagperf:local-path-provisioner"}
rules:
- apiGroups: [""]
  resources: [nodes, persistentvolumeclaims, configmaps, pods, pods/log]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "dagperf:local-path-provisioner"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "dagperf:local-path-provisioner"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "dagperf:local-path-provisioner"}]
---
apiVersion: v1
kind: Namespace
metadata: {name: local-path-storage}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: local-path-provisioner, namespace: local-path-storage}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, update, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: local-path-provisioner, namespace: local-path-storage}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-path-provisioner}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "dagperf:local-path-provisioner"}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-path-provisioner, namespace: local-path-storage}
automountServiceAccountToken: false
---
# Each claim's directory is node/volumes/<volume>_<namespace>_<claim>, made and removed by a helper
# pod of the project's image (it has a shell), as root: the directories are root's.
apiVersion: v1
kind: ConfigMap
metadata: {name: local-path-config, namespace: local-path-storage}
data:
  config.json: |-
    {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["$DIR/node/volumes"]}]}
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "\$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "\$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata: {name: helper-pod}
    spec:
      securityContext: {runAsUser: 0, runAsGroup: 0}
      containers:
      - name: helper-pod
        image: "${NODE_IMAGES[0]}"
        imagePullPolicy: Never
---
# Local volumes rather than the provisioner's default hostPath ones: the kubelet gives a local
# volume to the pod's fsGroup, as it gives a cloud disk. A claim binds once a pod that uses it is
# scheduled: its directory is made on the node the pod landed on.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true", defaultVolumeType: local}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
EOF
}

node_down() { # stops the node's parts and removes what they left outside their processes
  local sock="$DIR/node/containerd/containerd.sock"
  stop "$DIR/local-path.pid" # before it sees the pods go and starts helpers for their volumes
  stop "$DIR/kubelet.pid"
  # Every pod sandbox, through the runtime: its containers stop, the CNI plugins take back the
  # veth and the address, the shims exit.
  if [ -S "$sock" ]; then
    timeout 60 "$BIN/crictl" --runtime-endpoint "unix://$sock" rmp --all --force > /dev/null 2>&1
  fi
  stop "$DIR/containerd.pid"
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" || true); do
    kill -KILL "$pid" 2> /dev/null
  done
  for name in kube-proxy coredns kube-scheduler; do stop "$DIR/$name.pid"; done
  if [ -f node/kube-proxy.yaml ]; then
    "$BIN/kube-proxy" --cleanup --config node/kube-proxy.yaml > /dev/null 2>&1
  fi
  node_iptables_clean
  # Mounts under DIR (the kubelet's volumes, containerd's rootfs, shm and netns mounts), deepest
  # first.
  local mount
  awk -v dir="$DIR/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mount; do umount -l "$mount" 2> /dev/null; done
  local hierarchy made
  for hierarchy in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$hierarchy" ] && find "$hierarchy" -depth -type d -exec rmdir {} + 2> /dev/null
  done
  if [ -f "$DIR/node/host-dirs.made" ]; then # empty directories only: what is in use stays
    while read -r made; do
      # the kubelet's device-plugin socket, which it leaves when stopped
      [ "$made" = /var/lib/kubelet ] && rm -f /var/lib/kubelet/device-plugins/kubelet.sock
      [ -d "$made" ] && find "$made" -depth -type d -empty -delete 2> /dev/null
    done < "$DIR/node/host-dirs.made"
  fi
  return 0
}

node_network_down() { # after the API server has stopped: on its way out it deletes its lease
  # through the node's address (10 s of timeout, then SIGKILL, without it)
  # The pods' veths went with their namespaces; the bridge is ours.
  ip link del "$NODE_BRIDGE" 2> /dev/null
  if [ -f "$DIR/node/ip_forward.before" ]; then
    cat "$DIR/node/ip_forward.before" > /proc/sys/net/ipv4/ip_forward
    rm "$DIR/node/ip_forward.before"
  fi
  return 0
}

node_tables() { # the netfilter tables that exist, as `FAMILY NAME` lines
  nft list tables 2> /dev/null | sed -n 's/^table //p' | sort
}

node_iptables_clean() { # every KUBE-* chain of every table, and the rules that jump to them;
  # then the tables the node's first rules created (iptables-nft makes a table with its built-in
  # chains on first use), if nothing else has put a rule in them since
  local save restore table
  for save in iptables-save ip6tables-save; do
    restore="${save/-save/-restore}"
    command -v "$save" > /dev/null || continue
    for table in filter nat mangle raw; do
      "$save" -t "$table" 2> /dev/null | grep -q -- 'KUBE-' || continue
      {
        echo "*$table"
        "$save" -t "$table" | sed -n 's/^-A \([A-Z-]*\) \(.*-j KUBE-.*\)/-D \1 \2/p' | grep -v '^-D KUBE-'
        "$save" -t "$table" | sed -n 's/^:\(KUBE-[^ ]*\) .*/-F \1/p'
        "$save" -t "$table" | sed -n 's/^:\(KUBE-[^ ]*\) .*/-X \1/p'
        echo COMMIT
      } | "$restore" --noflush
    done
  done
  [ -f "$DIR/node/tables.before" ] || return 0
  local family name
  node_tables | comm -13 "$DIR/node/tables.before" - | while read -r family name; do
    save=iptables-save
    [ "$family" = ip6 ] && save=ip6tables-save
    [ "$family" = ip ] || [ "$family" = ip6 ] || continue
    "$save" -t "$name" 2> /dev/null | grep -q '^-A' || nft delete table "$family" "$name"
  done
}
