# syntax=docker/dockerfile:1
#
# loadwatcher container image, in two stages:
#   build    installs the package and its dependencies (all from wheels) into a virtual
#            environment at /opt/loadwatcher;
#   runtime  copies only that environment onto a clean slim base: no compiler, no pip cache,
#            no sources; runs as an unprivileged user with the journal on a volume.
#
#   docker build -t loadwatcher:0.1.0 .
#   docker run -p 2020:2020 -v loadwatcher-journal:/var/lib/loadwatcher loadwatcher:0.1.0
#
# tests/packaging/test_dockerfile_recipe.py runs this file's build steps into a fresh virtual
# environment, starts the result as the runtime stage would and runs the HEALTHCHECK
# against it, and lints this file with hadolint.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY loadwatcher ./loadwatcher
RUN python -m venv /opt/loadwatcher \
    && /opt/loadwatcher/bin/python -m pip install --no-cache-dir . \
    && /opt/loadwatcher/bin/loadwatcher --version

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="loadwatcher" \
      org.opencontainers.image.description="Node utilisation rollups for Kubernetes schedulers (Trimaran wire format)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/loadwatcher/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 loadwatcher \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /var/lib/loadwatcher --shell /usr/sbin/nologin loadwatcher \
    && mkdir -p /var/lib/loadwatcher \
    && chown 10001:10001 /var/lib/loadwatcher \
    && chmod 0700 /var/lib/loadwatcher
COPY --from=build /opt/loadwatcher /opt/loadwatcher
# The journal's default path (journal.path = loadwatcher.db) is relative to the working
# directory, so it lands on the volume without any setting.
WORKDIR /var/lib/loadwatcher
VOLUME ["/var/lib/loadwatcher"]
USER 10001:10001
EXPOSE 2020
# Liveness only (200 while the process serves), on LOADWATCHER_SERVER_PORT or 2020, never
# through a proxy; readiness and data health are /readyz and /watcher/health.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:%s/healthz' % os.environ.get('LOADWATCHER_SERVER_PORT', '2020'), timeout=4)"]
ENTRYPOINT ["loadwatcher"]
CMD ["serve"]
