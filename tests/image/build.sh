#!/usr/bin/env bash
# Builds the project's image from its one Dockerfile without a Docker engine, as root: podman on
# a Debian base made here with mmdebstrap (no container registry is needed, none is used), with
# build arguments only, so the Dockerfile stays the one users build with `docker build`.
#
#   tests/image/build.sh [OUTPUT_DIR]
#
# - The base: Debian bookworm (minbase, merged /usr, no documentation, man pages or locales)
#   with python3 (3.11), python3-venv (the Dockerfile's `python -m venv`), python-is-python3 (its
#   `python`) and ca-certificates; made once into $CACHE/base-STAMP/, STAMP a hash of its recipe
#   (a changed recipe makes a new base), and imported into podman as dagperf-base:STAMP.
# - The image: `podman build` with PYTHON_IMAGE set to the base by digest, and VERSION (from
#   pyproject.toml), REVISION and CREATED (the git commit and its time) for the OCI labels,
#   tagged with the name the chart runs: its image.repository and the project's version.
#   Podman's layer cache makes a build with nothing changed take seconds.
# - Beside it, in OUTPUT_DIR (default $CACHE/out): sbom.cdx.json, a CycloneDX SBOM of the
#   image's Python packages written by the image's own interpreter, and build.txt: what was
#   built from what (names, IDs, digests, labels).
# Podman is set up for a machine without systemd by containers.conf beside this script (runc,
# cgroupfs, events to a file, ulimits), through CONTAINERS_CONF; its store is root's default
# (overlay in /var/lib/containers/storage: a storage.conf of its own, even one saying the same,
# makes every `podman run` wait 20 s for its container's exit, as the cleanup podman runs after
# a container reads the default). podman, runc and mmdebstrap are installed with apt-get if
# missing.
# Prints the image's name and size as its last two lines.
#
#   DAGPERF_IMAGE_CACHE   where the base and the SBOM tool are kept (default below)
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${DAGPERF_IMAGE_CACHE:-$HOME/.cache/dagperf-image}"
OUT="${1:-$CACHE/out}"
export CONTAINERS_CONF="$HERE/containers.conf"

say() { echo "build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run it as root (rootful podman; mmdebstrap makes the base as root)"

# --- tools ---------------------------------------------------------------------------------
missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" > /dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
say "podman $(podman version --format '{{.Client.Version}}'): runtime runc, cgroup manager" \
  "cgroupfs, events to a file, ulimits nofile/nproc 20000/32768 ($CONTAINERS_CONF);" \
  "store: $(podman info --format '{{.Store.GraphDriverName}} in {{.Store.GraphRoot}}')"

# --- the base ------------------------------------------------------------------------------
SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
MIRRORS=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# Nothing reads documentation, man pages or translations in a container (copyright files stay).
DPKG_OPTIONS=(
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
)
MMDEBSTRAP=(mmdebstrap --variant=minbase --include="$PACKAGES"
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "${DPKG_OPTIONS[@]}")
stamp=$(printf '%s\n' "${MMDEBSTRAP[@]}" "$SUITE" "${MIRRORS[@]}" | sha256sum | cut -c1-12)
base_dir="$CACHE/base-$stamp"
base="localhost/dagperf-base:$stamp"

if [ ! -s "$base_dir/rootfs.tar" ]; then
  say "making the base (Debian $SUITE, $PACKAGES) into $base_dir"
  started=$SECONDS
  mkdir -p "$base_dir"
  rm -f "$base_dir/part.tar"
  # The package list is kept beside the tarball: what the base holds, at which versions.
  nice -n 10 "${MMDEBSTRAP[@]}" --quiet \
    --customize-hook="chroot \"\$1\" dpkg-query -W -f='\${Package} \${Version}\n' > '$base_dir/packages.txt'" \
    "$SUITE" "$base_dir/part.tar" "${MIRRORS[@]}"
  sha256sum < "$base_dir/part.tar" | cut -d" " -f1 > "$base_dir/rootfs.tar.sha256"
  mv "$base_dir/part.tar" "$base_dir/rootfs.tar"
  say "base made in $((SECONDS - started)) s"
fi
if ! podman image exists "$base"; then
  # The configuration a base image from a registry would carry (python:3.11-slim's PATH, LANG).
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    "$base_dir/rootfs.tar" "$base" > /dev/null
fi
base_digest=$(podman image inspect --format '{{.Digest}}' "$base")

# --- the image -----------------------------------------------------------------------------
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -1)
repository=$(sed -n '/^image:/,/^[^ #]/s/^  repository: *\([^ #]*\).*/\1/p' "$REPO/charts/dagperf/values.yaml")
[ -n "$version" ] && [ -n "$repository" ] || die "no version in pyproject.toml or image.repository in the chart's values"
image="$repository:$version"
revision=unknown created=unknown
if git -C "$REPO" rev-parse --verify -q HEAD > /dev/null; then
  revision=$(git -C "$REPO" rev-parse HEAD)
  git -C "$REPO" diff --quiet HEAD -- || revision="$revision-dirty"
  created=$(TZ=UTC0 git -C "$REPO" log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)
fi

build_args=(
  --build-arg "PYTHON_IMAGE=localhost/dagperf-base@$base_digest"
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created"
  # buildah (podman 4.3) reuses a cached LABEL step whose build arguments changed: the labels
  # that change with each commit are set on the image as it is committed, too.
  --label "org.opencontainers.image.version=$version"
  --label "org.opencontainers.image.revision=$revision"
  --label "org.opencontainers.image.created=$created"
)
# pip reaches the package index with this machine's CA bundle (it may hold a proxy's CA),
# mounted for the build's steps only: the image keeps Debian's own.
mounts=()
host_ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$host_ca" ] && mounts+=(--volume "$host_ca:$host_ca:ro")
say "building $image from $REPO/Dockerfile on $base"
started=$SECONDS
log="$CACHE/last-build.log"
mkdir -p "$CACHE"
nice -n 10 podman build --pull=never --network host --layers "${mounts[@]}" "${build_args[@]}" \
  --tag "$image" --file "$REPO/Dockerfile" "$REPO" > "$log" 2>&1 \
  || { tail -40 "$log" >&2; die "podman build failed (the whole log: $log)"; }
say "built in $((SECONDS - started)) s"
# The image this build replaced under the same name, now untagged, goes (the build's cached
# layers stay: they carry no label).
mapfile -t superseded < <(podman images --quiet --filter dangling=true \
  --filter label=org.opencontainers.image.title=dagperf)
[ ${#superseded[@]} -eq 0 ] || podman rmi --force "${superseded[@]}" > /dev/null 2>&1 || true

# --- beside it: the SBOM and what was built from what ----------------------------------------
mkdir -p "$OUT"
sbom_tool="$CACHE/sbom-tool"
if [ ! -d "$sbom_tool/cyclonedx_py" ]; then
  # cyclonedx-bom, installed for the image's interpreter (CPython 3.11 on glibc), runs inside
  # the image and reads its venv as pip would.
  python3 -m venv "$CACHE/pip"
  "$CACHE/pip/bin/pip" install --quiet --target "$sbom_tool.part" --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform "manylinux_2_28_$(uname -m)" --platform "manylinux_2_17_$(uname -m)" \
    --platform "manylinux2014_$(uname -m)" --platform any "cyclonedx-bom>=7"
  rm -rf "$sbom_tool" && mv "$sbom_tool.part" "$sbom_tool"
fi
image_id=$(podman image inspect --format '{{.Id}}' "$image")
sbom="$CACHE/sboms/$image_id.cdx.json" # one per image: an unchanged image keeps its SBOM
if [ ! -s "$sbom" ]; then
  mkdir -p "$CACHE/sboms"
  podman run --rm --pull=never --network none --read-only --cap-drop ALL \
    --volume "$sbom_tool:/sbom-tool:ro" --env SOURCE_DATE_EPOCH="$(date -d "${created/unknown/now}" +%s)" "$image" \
    python -c 'import runpy, sys; sys.path.insert(0, "/sbom-tool"); runpy.run_module("cyclonedx_py", run_name="__main__")' \
    environment --no-validate --output-reproducible --of JSON /opt/venv > "$sbom.part" 2> "$CACHE/last-sbom.log" \
    || { cat "$CACHE/last-sbom.log" >&2; die "the SBOM could not be made"; }
  mv "$sbom.part" "$sbom"
fi
find "$CACHE/sboms" -type f ! -name "$image_id.cdx.json" -delete
cp "$sbom" "$OUT/sbom.cdx.json"

size=$(podman image inspect --format '{{.Size}}' "$image")
{
  echo "image: localhost/$image"
  echo "id: sha256:$image_id"
  echo "digest: $(podman image inspect --format '{{.Digest}}' "$image")"
  echo "base: $base (Debian $SUITE: $PACKAGES; packages in $base_dir/packages.txt)"
  echo "base digest: $base_digest"
  echo "base tarball sha256: $(cat "$base_dir/rootfs.tar.sha256")"
  podman image inspect --format '{{range $k, $v := .Labels}}label: {{$k}}={{$v}}{{"\n"}}{{end}}' "$image"
  echo "sbom: $OUT/sbom.cdx.json"
} > "$OUT/build.txt"
cat "$OUT/build.txt"
echo
echo "image: localhost/$image"
echo "size: $((size / 1000000)) MB ($size bytes)"
