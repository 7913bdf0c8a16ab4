# Beam Python SDK worker image for the corpus, vocabulary, embedding and mining Beam jobs on Flink
# (portable runner) or Dataflow. Build from the repository root, no other step:
#   docker build -f docker/beam-worker.Dockerfile -t REGISTRY/labse-beam-worker:2.77.0 .
# The SDK version of the base image must equal the apache-beam version the job is launched with
# (pip show apache-beam); the build fails if they differ.
ARG BEAM_VERSION=2.77.0
FROM apache/beam_python3.11_sdk:${BEAM_VERSION}
ARG BEAM_VERSION
# CPU torch for CPU workers; for GPU workers running pipelines.embed pass
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0

# jemalloc under every process: glibc's heap kept growing on the torch stages (embedding 1M
# sentences on CPU peaked at 1,049 MiB against 702 at 10k; under jemalloc 752 MiB, flat, at
# 1.03x the time: bench/README "Embedding at 100x"). CDS scoring pays ~1.15x CPU under it for
# 60-200 MiB less; build with --build-arg JEMALLOC_PRELOAD= to keep glibc's allocator.
ARG JEMALLOC_PRELOAD=/usr/local/lib/libjemalloc.so.2
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjemalloc2 \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(ldconfig -p | awk '/libjemalloc\.so\.2/ {print $NF; exit}')" /usr/local/lib/libjemalloc.so.2 \
 && test -e /usr/local/lib/libjemalloc.so.2
ENV LD_PRELOAD=${JEMALLOC_PRELOAD}

WORKDIR /opt/labse
COPY pyproject.toml README.md ./
COPY filters ./filters
COPY pipelines ./pipelines
COPY labse_common ./labse_common
COPY labse_model ./labse_model
COPY mining ./mining
COPY configs ./configs

# torch first from the chosen index, so `pip install .` finds its constraint satisfied and pulls
# no CUDA packages; apache-beam pinned to the base image's SDK. The default lid.176.ftz ships
# inside the package.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
 && pip install --no-cache-dir "apache-beam[gcp]==${BEAM_VERSION}" . \
 && python -c "import apache_beam, fasttext; assert apache_beam.__version__ == '${BEAM_VERSION}', apache_beam.__version__; assert hasattr(fasttext, 'train_supervised')" \
 && python -c "from filters.langid import LanguageIdentifier as L; assert L().predict(['Das ist ein kleiner Test.'])[0].lang == 'de'" \
 && python -m pipelines.commoncrawl --help > /dev/null

# Optional larger models, baked in at fixed paths so jobs pass e.g. --lid-model /models/lid.176.bin
# (lid.176.bin, GlotLID model.bin, a trained quality.bin). docker/models/ holds at least its
# README, so the build never needs a manual step; put model files there to include them.
COPY docker/models/ /models/

# The Beam boot entrypoint of the base image stays as is (it starts the SDK harness, or the
# worker pool with --worker_pool).
