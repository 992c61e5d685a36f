# One image for every role: the operator (`dagperf-operator`), the benchmark scheduler and
# workers (`dagperf scheduler`, `dagperf worker`) and the demo simulator (`dagperf simulate`).
# The Kubernetes manifests set the command; the image only provides the programs.
#
#   docker build -t dagperf:latest .
#
# Two stages: the builder installs the project into a virtualenv; the final stage copies only
# that virtualenv onto a fresh base, so no build tools, pip caches or sources reach the image.
# Both stages use the same base so the venv's interpreter path (/usr/local/bin/python3.11)
# exists in the final stage.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker/ worker/
COPY operator/ operator/
# Not editable: the venv must hold the code itself, since /src stays behind in this stage.
# The operator extra brings kopf and the kubernetes client; the test extra is left out.
# Every dependency ships wheels for CPython 3.11 on amd64 and arm64, so no compiler is needed.
# The import check fails the build here, not in a cluster, if a dependency is missing.
RUN pip install --no-cache-dir ".[operator]" \
    && python -c "import dagperf.cli, dagperf_operator.handlers" \
    && dagperf --version


FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="dagperf" \
      org.opencontainers.image.description="Benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversation workloads: operator, scheduler, workers and simulator" \
      org.opencontainers.image.licenses="Apache-2.0"

# uid/gid 10001 is OperatorSettings.run_as_user, the user benchmark pods run as; the files the
# image holds are owned by root and only readable by it, which suits a read-only root
# filesystem. HOME is /tmp, the emptyDir the pods mount there.
RUN groupadd --system --gid 10001 dagperf \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin dagperf

COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

WORKDIR /tmp
USER 10001:10001

CMD ["dagperf", "--help"]
