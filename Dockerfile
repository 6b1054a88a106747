# The attention explorer as a public Hugging Face Space (Docker SDK) or any container host.
#   docker build -t attention-explorer .
#   docker run -p 8501:8501 attention-explorer                                  # checkpoints/ baked in
#   docker run -p 8501:8501 -e ATTN_CHECKPOINT=user/multi30k-en-de -e ATTN_MODELS=user/multi30k-en-de attention-explorer
# Closest check without a Docker engine: .venv/bin/python .ci/image_check (reads this file; .ci/run runs it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_SERVER_HEADLESS=true \
    ATTN_PUBLIC=1 \
    ATTN_MODELS=checkpoints/multi30k-en-de,checkpoints/multi30k-en-de-prenorm \
    ATTN_MAX_WORK=1000 \
    ATTN_HEAVY_JOBS=1 \
    ATTN_DATA_DIR=/home/user/app/data/multi30k
# Public mode offers exactly ATTN_MODELS (no Hub download unless it names a repo id); every request's work is
# capped at ATTN_MAX_WORK units and heavy jobs queue for ATTN_HEAVY_JOBS slots (docs/limits.md).

WORKDIR /home/user/app
# The project itself, pinned by constraints.txt; CPU-only torch first (a plain install would pull CUDA).
COPY pyproject.toml README.md constraints.txt ./
COPY transformer/ transformer/
COPY app/ app/
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu" && \
    pip install -c constraints.txt ".[app]"
# Multi30k's test split (the project never ships its lines): "Whole test set" joins the sources and references back
# to the shipped tables (checkpoints/*/tables/test_2016_flickr.parquet) by line id.
RUN python -m transformer.data --download data/multi30k --splits test_2016_flickr --langs en de

# Spaces run the container as user 1000. The shipped checkpoints (config.json, model.safetensors,
# tokenizer.model, metadata.json, heads.json, snapshots/) come in as they are; tests, bench and training
# runs stay out (.dockerignore). Without checkpoints/, set ATTN_CHECKPOINT and ATTN_MODELS to Hub repo ids.
RUN useradd --create-home --uid 1000 user
COPY --chown=user:user .streamlit/ .streamlit/
COPY --chown=user:user checkpoints/ checkpoints/
USER user
ENV HOME=/home/user \
    HF_HOME=/home/user/.cache/huggingface

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health')"
CMD ["streamlit", "run", "app/serve.py", "--server.port=8501", "--server.address=0.0.0.0"]
