# Training image: pretraining and dual-encoder training under torchrun on NVIDIA GPUs (NCCL).
# Build from the repository root, no other step:
#   docker build -f docker/train.Dockerfile -t REGISTRY/labse-train:0.1.0 .
# Run (the host needs the NVIDIA driver and the NVIDIA container toolkit; the CUDA runtime comes
# inside the torch wheel):
#   docker run --gpus all --ipc=host -v /data:/data REGISTRY/labse-train:0.1.0 \
#       train --config paper --pairs '/data/pairs/*.parquet' --vocab /data/vocab \
#       --output /data/runs/labse --nproc-per-node 8
# Several nodes: the same command on every node with --nnodes N --rdzv-endpoint HOST:29500
# (--network host so the rendezvous and NCCL ports are reachable).
FROM python:3.11.11-slim-bookworm
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.13.0

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    NCCL_DEBUG=WARN
WORKDIR /opt/labse
COPY pyproject.toml README.md ./
COPY filters ./filters
COPY pipelines ./pipelines
COPY labse_common ./labse_common
COPY labse_model ./labse_model
COPY mining ./mining
COPY configs ./configs

# CUDA torch first (its wheel bundles the CUDA/cuDNN/NCCL runtime), then the project against it
# and faiss on GPU for mining/evaluation on the same machines.
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
 && pip install ".[gpu]" \
 && python -c "import torch, torch.distributed as d; assert d.is_nccl_available() or not torch.version.cuda; print(torch.__version__, torch.version.cuda)" \
 && python -m labse_model train --help > /dev/null

ENTRYPOINT ["python", "-m", "labse_model"]
CMD ["--help"]
