# One image for every role: the operator (`dagperf-operator`), the benchmark scheduler and
# workers (`dagperf scheduler`, `dagperf worker`) and the demo simulator (`dagperf simulate`).
# The Kubernetes manifests set the command; the image only provides the programs.
#
#   docker build -t dagperf:0.1.0 .
#
# (the name the chart, the examples and the operator's default use: the chart's
# image.repository and the project's version). tests/image/build.sh builds this same file
# without a Docker engine (podman, on a Debian base made with mmdebstrap), through build
# arguments only, and fills the labels' arguments below.
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
# The dependencies first, in a layer of their own that only a change of pyproject.toml rebuilds:
# a change of the sources then reinstalls only the project itself. Not editable: the venv must
# hold the code itself, since /src stays behind in this stage. The operator extra brings kopf
# and the kubernetes client; the test extra is left out. Every dependency ships wheels for
# CPython 3.11 on amd64 and arm64, so no compiler is needed. pip compiles nothing here
# (--no-compile): see below.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
        print(*p['build-system']['requires'], *p['project']['dependencies'], \
              *p['project']['optional-dependencies']['operator'], sep='\n')" > requirements.txt \
    && pip install --no-cache-dir --no-compile -r requirements.txt

COPY README.md ./
COPY worker/ worker/
COPY operator/ operator/
# Then what no role runs leaves the venv: pip and setuptools (nothing installs at run time) and
# the dependencies' own test suites. Bytecode is compiled only for the modules the roles import:
# importing every module of dagperf and dagperf_operator writes the .pyc files of everything
# they import at start-up, which each process would otherwise compile again and again (the
# root filesystem is read-only). What is imported later or never (most of plotly, whose
# JavaScript bundle is what the report uses; much of the kubernetes client) stays source only;
# the kubernetes client's asyncio copy (kubernetes.aio, 40 MB), which nothing imports, goes.
# Importing every module fails the build here, not in a cluster, if a dependency is missing.
RUN pip install --no-cache-dir --no-compile --no-deps --no-build-isolation ".[operator]" \
    && pip check \
    && pip uninstall --yes --quiet pip setuptools \
    && site=$(python -c "import sysconfig; print(sysconfig.get_path('purelib'))") \
    && find "$site" -depth -type d -name tests -exec rm -rf {} + \
    && rm -rf "$site/kubernetes/aio" \
    && python -c "import importlib, pkgutil, sys; [importlib.import_module(m.name) \
        for p in map(importlib.import_module, sys.argv[1:]) \
        for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.') \
        if not m.name.endswith('.__main__')]" dagperf dagperf_operator \
    && dagperf --version \
    && dagperf-operator --help > /dev/null


FROM ${PYTHON_IMAGE}

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

# What the image is and where it comes from (the OCI annotation keys), filled by the build
# (tests/image/build.sh: the version from pyproject.toml, the git commit and its time). Last,
# so that a new commit changes only this step.
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=https://github.com/dagperf/dagperf
LABEL org.opencontainers.image.title="dagperf" \
      org.opencontainers.image.description="Benchmark OpenAI-compatible LLM endpoints with DAG-shaped conversation workloads: operator, scheduler, workers and simulator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.url="${SOURCE}"
