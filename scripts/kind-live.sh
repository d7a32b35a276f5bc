#!/usr/bin/env bash
# The live Kubernetes suite on a local kind cluster (docs/kubernetes.md, "The live suite").
#
#   scripts/kind-live.sh up         create the cluster, build and load the image, apply the manifests
#   scripts/kind-live.sh test [ARGS] run `pytest -m live_k8s tests/k8s/live` against it (ARGS to pytest)
#   scripts/kind-live.sh down       delete the cluster, the image and the local state
#   scripts/kind-live.sh config     print the kind cluster config (needs no tools)
#   scripts/kind-live.sh manifests  print the manifests `up` applies (needs no tools)
#
# The cluster: one control-plane node (tainted by kind, so no test pod lands there) and two
# workers labelled clawpoint.io/live-worker=true, which the live tests select. One host
# directory ($STATE/shared) is mounted into every node at /var/lib/clawpoint-shared, so the
# hostPath PersistentVolumes of deploy/kind/shared-storage.yaml are one ReadWriteMany volume
# across nodes. deploy/kubernetes/seccomp/, when present, is mounted read-only as the
# kubelet's seccomp profile directory (/var/lib/kubelet/seccomp/profiles), so a pod's
# `localhostProfile: profiles/NAME.json` resolves on every node.
#
# Every step is idempotent: `up` again reuses the cluster and re-applies; `test` resets the
# live namespace and its volumes first; `down` removes what `up` created (and nothing if
# there is nothing). Needs kind, docker (with its daemon running) and kubectl; refuses with
# exit code 3, naming what is missing, otherwise.
#
# Environment: KIND_CLUSTER_NAME (default clawpoint-live), KIND_NODE_IMAGE (default the
# Kubernetes 1.34 node image below), CLAWPOINT_LIVE_IMAGE (default clawpoint:live: the tag
# built and loaded), CLAWPOINT_KIND_STATE (default .kind-live in the repository),
# CLAWPOINT_LIVE_WAIT_S (default 120: the longest single wait of a live test), PYTHON (default
# .venv/bin/python).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=${KIND_CLUSTER_NAME:-clawpoint-live}
# The Kubernetes version the docs and the schema checks name (1.34); kind's release notes list
# the node image built for each kind release: use that one when your kind is newer.
NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.34.0@sha256:7416a61b42b1662ca6ca89f02028ac133a309a2a30ba309614e8ec94d976dc5a}
IMAGE=${CLAWPOINT_LIVE_IMAGE:-clawpoint:live}
STATE=${CLAWPOINT_KIND_STATE:-$ROOT/.kind-live}
SHARED=$STATE/shared
KUBECONFIG_FILE=$STATE/kubeconfig
SHARED_IN_NODE=/var/lib/clawpoint-shared
SECCOMP_DIR=${CLAWPOINT_KIND_SECCOMP_DIR:-$ROOT/deploy/kubernetes/seccomp}
LIVE_NS=clawpoint-live  # fixed: deploy/kind/shared-storage.yaml pre-binds its volumes there
WORKER_LABEL=clawpoint.io/live-worker
PLACEHOLDER='registry\.example\.com/clawpoint@sha256:[0-9a-f]\{64\}'

log() { printf 'kind-live: %s\n' "$*" >&2; }
die() { log "$1"; exit "${2:-1}"; }

usage() {
  sed -n '4,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Refuse clearly, before touching anything, when a tool is missing.
require() {
  local missing=() tool
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      case $tool in
        kind) missing+=("kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)") ;;
        docker) missing+=("docker (Docker Engine, with its daemon running)") ;;
        kubectl) missing+=("kubectl (https://kubernetes.io/docs/tasks/tools/)") ;;
        *) missing+=("$tool") ;;
      esac
    fi
  done
  if ((${#missing[@]})); then
    local IFS=,
    die "cannot run without these, install them first: ${missing[*]}" 3
  fi
  if [[ " $* " == *" docker "* ]] && ! docker info >/dev/null 2>&1; then
    die "docker is installed but its daemon does not answer (docker info failed): start it, or give this user access to it." 3
  fi
}

kc() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

cluster_exists() { kind get clusters 2>/dev/null | grep -qx -- "$CLUSTER"; }

# kind's own config format (sigs.k8s.io/kind pkg/apis/config/v1alpha4): the same extra
# mounts on every node; labels on the workers.
render_config() {
  local mounts
  mounts="    extraMounts:
      - hostPath: \"$SHARED\"
        containerPath: $SHARED_IN_NODE"
  if [[ -d $SECCOMP_DIR ]]; then
    mounts+="
      - hostPath: \"$SECCOMP_DIR\"
        containerPath: /var/lib/kubelet/seccomp/profiles
        readOnly: true"
  fi
  # Pod Security baseline admits the workloads' procMount: Unmasked in a user-namespaced pod
  # from policy 1.35 on; a 1.29-1.34 API server does so only with this (alpha) gate, which
  # 1.35 removed (docs/kubernetes.md, "securityContext for CRIU").
  local gates=""
  if [[ $NODE_IMAGE =~ :v1\.(29|3[0-4])\. ]]; then
    gates="featureGates:
  UserNamespacesPodSecurityStandards: true"
  fi
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
$gates
nodes:
  - role: control-plane
    image: $NODE_IMAGE
$mounts
  - role: worker
    image: $NODE_IMAGE
    labels:
      $WORKER_LABEL: "true"
$mounts
  - role: worker
    image: $NODE_IMAGE
    labels:
      $WORKER_LABEL: "true"
$mounts
EOF
}

# deploy/kubernetes as applied on kind: the shared volumes, the ReadWriteMany claims on
# their class, the image loaded with `kind load` instead of the placeholder digest.
# example-job.yaml is left out (it asks for a GPU).
render_manifests() {
  cat "$ROOT/deploy/kind/shared-storage.yaml"
  printf -- '---\n'
  sed 's/^  accessModes: \["ReadWriteMany"\]$/&\n  storageClassName: clawpoint-shared/' \
    "$ROOT/deploy/kubernetes/storage.yaml"
  printf -- '---\n'
  cat "$ROOT/deploy/kubernetes/rbac.yaml"
  printf -- '---\n'
  sed "s#$PLACEHOLDER#$IMAGE#" "$ROOT/deploy/kubernetes/server.yaml"
}

# The volumes' directories, made from inside a node (writable by the pods' users: the
# server runs as uid 10001, and hostPath volumes ignore fsGroup).
ensure_shared() {
  docker exec "$CLUSTER-control-plane" mkdir -p -m 1777 -- \
    "$SHARED_IN_NODE/$1/checkpoints" "$SHARED_IN_NODE/$1/keys"
}

# Empty a namespace's volumes, from inside a node: the pods write there as root.
reset_shared() {
  docker exec "$CLUSTER-control-plane" rm -rf -- "$SHARED_IN_NODE/$1"
  ensure_shared "$1"
}

up() {
  require kind docker kubectl
  mkdir -p "$SHARED"
  if cluster_exists; then
    log "cluster $CLUSTER exists: reusing it"
    kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE"
  else
    render_config >"$STATE/kind.yaml"
    kind create cluster --name "$CLUSTER" --config "$STATE/kind.yaml" \
      --kubeconfig "$KUBECONFIG_FILE" --wait 180s
  fi
  ensure_shared ml-training
  docker build -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$ROOT"
  kind load docker-image "$IMAGE" --name "$CLUSTER"
  render_manifests | kc apply -f -
  if ! kc -n ml-training get secret clawpoint-tokens >/dev/null 2>&1; then
    kc -n ml-training create secret generic clawpoint-tokens \
      --from-literal=mcp-token="$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')"
  fi
  kc -n ml-training rollout status deployment/clawpoint-server --timeout=180s
  kc -n ml-training rollout status deployment/clawpoint-watch --timeout=120s
  log "ready: KUBECONFIG=$KUBECONFIG_FILE; run: scripts/kind-live.sh test"
}

test_() {
  require kind docker kubectl
  cluster_exists || die "no kind cluster $CLUSTER: run scripts/kind-live.sh up first"
  kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE"
  local python=${PYTHON:-$ROOT/.venv/bin/python}
  [[ -x $python ]] || die "no Python at $python: run make venv (or set PYTHON)"
  # A fresh live namespace and volumes: a previous run's namespace is deleted (the suite
  # deletes it itself when it ends), its Released volumes re-created, their files removed.
  kc delete namespace "$LIVE_NS" --ignore-not-found --wait=true --timeout=180s
  kc delete pv -l clawpoint.io/live=true --ignore-not-found --wait=true --timeout=60s
  reset_shared "$LIVE_NS"
  kc apply -f "$ROOT/deploy/kind/shared-storage.yaml"
  cd "$ROOT"
  KUBECONFIG=$KUBECONFIG_FILE \
    CLAWPOINT_LIVE_IMAGE=$IMAGE \
    CLAWPOINT_LIVE_NAMESPACE=$LIVE_NS \
    CLAWPOINT_LIVE_STORAGE_CLASS=clawpoint-shared \
    CLAWPOINT_LIVE_NODE_LABEL=$WORKER_LABEL=true \
    CLAWPOINT_LIVE_WAIT_S=${CLAWPOINT_LIVE_WAIT_S:-120} \
    "$python" -m pytest -m live_k8s -n 0 -q tests/k8s/live "$@"
}

down() {
  require kind docker
  if cluster_exists; then
    # The shared directory holds files the pods wrote as root: remove them from inside.
    docker exec "$CLUSTER-control-plane" find "$SHARED_IN_NODE" -mindepth 1 -delete || true
    kind delete cluster --name "$CLUSTER"
  else
    log "no cluster $CLUSTER"
  fi
  docker image rm "$IMAGE" >/dev/null 2>&1 || true
  rm -rf -- "$STATE"
}

case ${1:-} in
  up) up ;;
  test) shift; test_ "$@" ;;
  down) down ;;
  config) render_config ;;
  manifests) render_manifests ;;
  *) usage ;;
esac
