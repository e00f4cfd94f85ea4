# syntax=docker/dockerfile:1
# SoulFlow in a container: see docs/operations.md ("Running in Docker").
#
#   docker build -t soulflow .                          # without the embedded model
#   docker build -t soulflow --build-arg EXTRAS=local . # with it (compiles llama.cpp, ~15 min)
#   docker build -t soulflow --build-arg EXTRAS=otel .  # with OpenTelemetry traces
#   docker volume create soulflow-data
#   docker run -d --name soulflow -v soulflow-data:/workspace --env-file .env soulflow
#   docker exec soulflow soulflow doctor
FROM python:3.11-slim

# "local" adds the embedded model (llama-cpp-python is compiled: needs a compiler and CMake);
# "otel" the OpenTelemetry exporter (docs/operations.md, "Traces"); "local,otel" both
ARG EXTRAS=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SOULFLOW_WORKSPACE=/workspace

# bubblewrap: the code sandbox; nodejs + npm: the diagram_render tool's Mermaid renderer
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap nodejs npm \
    && if [ -n "$EXTRAS" ]; then \
         apt-get install -y --no-install-recommends build-essential cmake; \
       fi \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/soulflow
COPY pyproject.toml README.md ./
COPY soulflow ./soulflow
# install the package, then the renderer's pinned npm packages next to the installed copy
# llama.cpp for x86-64 with AVX2, not -march=native: an image runs on other CPUs than the
# builder's (and some VMs report AMX they do not enable); override with --build-arg CMAKE_ARGS=
ARG CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
RUN CMAKE_ARGS="$(if [ "$(uname -m)" = x86_64 ]; then echo "$CMAKE_ARGS"; fi)" \
    pip install ".${EXTRAS:+[$EXTRAS]}" \
    && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --prefix "$(python -c \
       'import soulflow.agent.diagram.render as r; print(r.PACKAGE_DIR)')" \
    && npm cache clean --force

# never run as root: a non-root user, owning only its workspace
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin soulflow \
    && mkdir -p /workspace && chown soulflow:soulflow /workspace && chmod 700 /workspace
USER soulflow
VOLUME ["/workspace"]

# The dashboard listens on 127.0.0.1 inside the container by default, which a published port
# cannot reach. To open it from outside set DASHBOARD_HOST=0.0.0.0 *and* DASHBOARD_TOKEN (the
# daemon refuses a non-loopback address without a token), and publish it on the host's
# loopback only: -p 127.0.0.1:3789:3789.
EXPOSE 3789

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('DASHBOARD_PORT', '3789') + '/healthz', timeout=4)" || exit 1

ENTRYPOINT ["soulflow"]
CMD ["run"]
