# syntax=docker/dockerfile:1
# Builds `ragagent serve` the way `make setup` installs it: the same make targets fetch the
# third-party protos and the embedding model (pinned, checksummed) and install the project.
# tests/server/test_packaging.py keeps the two in step.

FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md Makefile buf.yaml ./
COPY protos ./protos
COPY generated ./generated
COPY service ./service
ENV XDG_CACHE_HOME=/tmp/cache \
    RAGAGENT_EMBEDDING_MODEL_DIR=/opt/ragagent/model
RUN make venv protos-deps gen-deps install-runtime models VENV=/opt/venv

FROM python:3.11-slim AS runtime
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin ragagent \
    && mkdir -p /data && chown ragagent /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/ragagent/model /opt/ragagent/model
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    RAGAGENT_ADDRESS=0.0.0.0:50051 \
    RAGAGENT_DATA_DIR=/data \
    RAGAGENT_EMBEDDING_MODEL_DIR=/opt/ragagent/model \
    RAGAGENT_LOG_FORMAT=json
USER ragagent
VOLUME ["/data"]
EXPOSE 50051
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["ragagent", "health"]
ENTRYPOINT ["ragagent"]
CMD ["serve"]
