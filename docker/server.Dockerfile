# The mlyard server image: `mlyard server run` with the Kubernetes client.
#
#   docker build -f docker/server.Dockerfile -t mlyard/server:0.1.0 .
#
# It runs as uid/gid 1000, the user job pods run as (MLYARD_K8S_RUN_AS_USER), so both can
# read and write the shared volume mounted at MLYARD_HOME.
# With MLYARD_BACKEND=local, jobs run in namespaces that hide MLYARD_HOME, with a /proc of their
# own: run the container with --security-opt systempaths=unconfined (the engine's masked /proc
# refuses a new one), or the server refuses to start.
# The Python the image is built on (a registry's python:3.11-slim-bookworm, or a mirror's).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
# Where pip finds packages (build arguments, so none of it stays in the image); empty, the
# base image's pip settings hold. An offline cluster's mirror: --build-arg
# PIP_INDEX_URL=https://mirror.example/simple; PIP_FIND_LINKS, a page or directory of wheels
# pip takes first.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_FIND_LINKS=
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_FIND_LINKS=
RUN groupadd --gid 1000 mlyard \
    && useradd --uid 1000 --gid 1000 --home-dir /home/mlyard --create-home --shell /usr/sbin/nologin mlyard \
    && mkdir -p /var/lib/mlyard && chown 1000:1000 /var/lib/mlyard
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir "$(ls /wheels/mlyard-*.whl)[kubernetes]" && rm -rf /wheels
ENV MLYARD_HOME=/var/lib/mlyard \
    MLYARD_HOST=0.0.0.0 \
    MLYARD_PORT=8642 \
    MLYARD_BACKEND=kubernetes \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
WORKDIR /home/mlyard
EXPOSE 8642
ENTRYPOINT ["mlyard"]
CMD ["server", "run"]
