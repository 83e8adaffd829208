# inferstream: one image for every role (ENTRYPOINT inferstream; the command picks the role).
#   docker build -t inferstream:cuda .                     # torch from PyPI, with CUDA
#   docker build -t inferstream:cpu --build-arg TORCH=cpu .
FROM python:3.11-slim

# cuda: PyPI's torch wheels (CUDA on linux/x86_64; the NVIDIA container toolkit brings the
# driver). cpu: the same pinned versions from PyTorch's CPU-only index (+cpu builds).
ARG TORCH=cuda

# jemalloc: glibc hands batch-sized buffers back to the kernel and faults them in again on
# every batch; a caching allocator made the CPU forward pass up to 2.7x faster (BENCHMARKS.md,
# P1, suggestion 4).
# g++: torch.compile builds the worker's compiled forward pass (C++ on a CPU, Triton's launcher
# on CUDA); without it the worker runs eager and says so (src/inferstream/models/forward.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libjemalloc2 g++ \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dpkg -L libjemalloc2 | grep '/libjemalloc\.so\.2$')" /usr/local/lib/libjemalloc.so.2

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/inferstream
COPY pyproject.toml README.md ./
COPY src ./src
RUN set -eu; \
    case "$TORCH" in \
        cuda) index="" ;; \
        cpu) index="--extra-index-url https://download.pytorch.org/whl/cpu" ;; \
        *) echo "TORCH must be cuda or cpu, got $TORCH" >&2; exit 2 ;; \
    esac; \
    pip install $index .

RUN useradd --system --uid 10001 --create-home --home-dir /home/inferstream inferstream \
    && mkdir -p /var/lib/inferstream/weights /var/lib/inferstream/compiled \
    && chown -R inferstream:inferstream /var/lib/inferstream

# Weights files for models without packaged weights (efficientnet_lite0's come with the
# package); searched before torch's cache (src/inferstream/models/weights.py).
ENV INFERSTREAM_WEIGHTS_DIR=/var/lib/inferstream/weights \
    INFERSTREAM_WORKER_COMPILE_CACHE_DIR=/var/lib/inferstream/compiled \
    TORCH_HOME=/var/lib/inferstream/torch \
    PYTHONUNBUFFERED=1 \
    LD_PRELOAD=/usr/local/lib/libjemalloc.so.2 \
    MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1
# Torch's CPU threads: OMP_NUM_THREADS is left to the deployment (docker-compose.yml sets it per
# worker kind: 1 next to a GPU, the cores the forward pass may use on a CPU worker); unset, torch
# uses every core the container sees.
VOLUME ["/var/lib/inferstream/weights", "/var/lib/inferstream/compiled"]

USER inferstream
WORKDIR /home/inferstream
# A long-running role's PID 1 is its supervisor (restart = on): it passes SIGTERM to the role
# once, restarts it when it dies natively, and reaps orphans, so no init is needed.
ENTRYPOINT ["inferstream"]
CMD ["--help"]
