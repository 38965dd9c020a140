# syntax=docker/dockerfile:1
# toolserver — one image for GPU and CPU hosts.
#
# torch comes from PyPI at the version constraints.txt pins; on Linux x86-64 that wheel carries its CUDA
# runtime, so the image uses an NVIDIA GPU when the container is given one (docker-compose.yml reserves it)
# and runs on the CPU otherwise. For a smaller CPU-only image:
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu -t toolserver:cpu .
# The SMFANet weights are package data (toolserver/sr/smfanet, Apache-2.0, 4.5 MB, sha256-checked at load): the
# package installed below carries them, no download step. To use others, mount a directory at /models/smfanet and
# set TOOLSERVER_SR_MODEL_DIR=/models/smfanet.
# Model-written code (run_python) runs in a sandbox of namespaces that Docker's default seccomp and AppArmor
# profiles block: docker-compose.sandbox.yml lifts them (docs/sandbox.md); libseccomp2, which the
# sandbox's own filter uses, is in the base image.
# The bicubic resize kernels (toolserver.resample) are compiled once at build time into NUMBA_CACHE_DIR, which
# the server's user can read and extend.
# So are the validators' compiled punkt kernels (toolserver.validation.punkt_native), checked against NLTK there.
# CLIP for document pages: FETCH_CLIP=1 bakes
# clip-ViT-B-32 into the image's Hugging Face cache, or mount a cache at /home/toolserver/.cache/huggingface.
# The image for a Ray cluster (KubeRay's RayService, deploy/k8s/ray) adds the ray extra:
#   docker build --build-arg EXTRAS=docs,rewards,ray -t toolserver-ray:0.1.0 .
# The distribution is named vlm-toolserver on PyPI (the import name and the `toolserver` command stay); here it is
# installed from this source tree.

ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

ARG TORCH_INDEX=""
ARG FETCH_CLIP=0
ARG EXTRAS=docs,rewards,perception

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/toolserver/bin:$PATH \
    NUMBA_CACHE_DIR=/var/cache/toolserver/numba

WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY toolserver ./toolserver
COPY deploy ./deploy

# The same steps as the README's set-up, without the dev tools: a virtual environment, torch pinned.
# redis-server: `toolserver serve --workers N` (default auto) keeps the sessions of its processes in a private
# Redis on a unix socket (docs/node.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/toolserver \
 && if [ -n "$TORCH_INDEX" ]; then pip install --index-url "$TORCH_INDEX" "torch==$(sed -n 's/^torch==//p' constraints.txt)"; fi \
 && pip install -c constraints.txt ".[${EXTRAS}]" \
 && python -c "from toolserver import resample; assert resample.exact_here()" \
 && python -c "from toolserver.validation import sentences; assert sentences.native_punkt()" \
 && useradd --create-home --uid 10001 toolserver \
 && mkdir -p /data /models/smfanet \
 && chown -R toolserver:toolserver /data /models /var/cache/toolserver

USER toolserver
RUN if [ "$FETCH_CLIP" = "1" ]; then python -c "from sentence_transformers import SentenceTransformer as S; S('clip-ViT-B-32')"; fi

ENV TOOLSERVER_HOST=0.0.0.0 \
    TOOLSERVER_PORT=8000 \
    TOOLSERVER_DATA_DIR=/data \
    TOOLSERVER_LOG_FORMAT=json \
    HF_HUB_OFFLINE=1
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1

# deploy/entrypoint.sh is also how the scale-out test starts replicas outside Docker.
ENTRYPOINT ["/src/deploy/entrypoint.sh"]
