# The attention explorer as a Hugging Face Space (Docker SDK) or any container host.
#   docker build -t attention-explorer .
#   docker run -p 8501:8501 attention-explorer                                  # checkpoints/ baked in
#   docker run -p 8501:8501 -e ATTN_CHECKPOINT=user/multi30k-en-de attention-explorer   # from the Hub
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_SERVER_HEADLESS=true

# CPU-only PyTorch keeps the image small; the app uses CUDA by itself when the host gives it a GPU
# and a CUDA build of torch is installed instead.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2,<3" && \
    pip install "numpy>=1.24" "sentencepiece>=0.2" "safetensors>=0.4" "huggingface_hub>=0.23" "tqdm>=4.66" \
                "streamlit>=1.67,<2" "plotly>=6" "pandas>=2.0"

# Spaces run the container as user 1000
RUN useradd --create-home --uid 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    HF_HOME=/home/user/.cache/huggingface
WORKDIR /home/user/app

# transformer/, app/, .streamlit/ and the shipped checkpoint in checkpoints/ (config.json, model.safetensors,
# tokenizer.model, metadata.json, snapshots/); .dockerignore keeps the rest out. Without checkpoints/, set
# ATTN_CHECKPOINT (a Space variable) to a Hugging Face Hub repo id and the app downloads it at start.
COPY --chown=user:user . .

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health')"
CMD ["streamlit", "run", "app/main.py", "--server.port=8501", "--server.address=0.0.0.0"]
