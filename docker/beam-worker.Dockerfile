# Beam Python SDK worker image for the corpus jobs on Flink (portable runner) or Dataflow.
# Build from the repository root:
#   docker build -f docker/beam-worker.Dockerfile -t REGISTRY/labse-beam-worker:latest .
# The SDK version in the base image must match the apache-beam version the job is launched with.
ARG BEAM_VERSION=2.77.0
FROM apache/beam_python3.11_sdk:${BEAM_VERSION}

WORKDIR /opt/labse
COPY pyproject.toml README.md ./
COPY filters ./filters
COPY pipelines ./pipelines
COPY labse_common ./labse_common
COPY labse_model ./labse_model
COPY mining ./mining
COPY configs ./configs

# torch is pinned first (use your CPU wheel index for CPU-only workers, or the CUDA build for
# GPU workers running pipelines.embed); the default lid.176.ftz ships inside the package.
RUN pip install --no-cache-dir torch==2.13.0 \
 && pip install --no-cache-dir . \
 && python -c "import fasttext; assert hasattr(fasttext, 'train_supervised')"

# Models are baked in at fixed paths so jobs pass e.g. --lid-model /models/lid.176.bin.
# Put lid.176.bin / GlotLID model.bin / a trained quality.bin into docker/models/ before building.
COPY docker/models/ /models/

# The Beam boot entrypoint of the base image stays as is.
