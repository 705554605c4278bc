# The base image for PyTorch training jobs on Kubernetes: Python, PyTorch (whose wheels
# bring the CUDA and NCCL libraries; the driver comes from the node through the NVIDIA
# container toolkit), and mlyard itself, which every job pod needs: pods run
# `python -m mlyard.backends.kubernetes.entrypoint`.
#
#   docker build -f docker/pytorch.Dockerfile -t mlyard/pytorch:0.1.0 .
#
# Build your own image FROM this one to add your project's dependencies, and name it in the
# job's `image` (or as MLYARD_K8S_IMAGE for every job).
# The Python the image is built on (a registry's python:3.11-slim-bookworm, or a mirror's).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
# Where pip finds packages (build arguments, so none of it stays in the image); empty, the
# base image's pip settings hold. An offline cluster's mirror: --build-arg
# PIP_INDEX_URL=https://mirror.example/simple; PIP_FIND_LINKS, a page or directory of wheels
# pip takes first (a CPU-only torch, say).
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
ARG TORCH_VERSION=2.13.0
RUN groupadd --gid 1000 mlyard \
    && useradd --uid 1000 --gid 1000 --home-dir /home/mlyard --create-home --shell /bin/bash mlyard
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" "scikit-learn==1.9.1" "tensorboard==2.21.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/mlyard-*.whl && rm -rf /wheels
# The examples, for trying a cluster out (`python /opt/mlyard/examples/digits_ddp.py`).
COPY examples /opt/mlyard/examples
# The NVIDIA container toolkit mounts the driver's compute libraries and nvidia-smi. Which
# GPUs a pod sees is the device plugin's choice: none is named here, so a pod without GPUs sees none.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /home/mlyard
CMD ["python"]
