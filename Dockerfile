# syntax=docker/dockerfile:1
# servinglib's server image: the built wheel with ONNX Runtime and the CPU build of PyTorch,
# run as an unprivileged user, with a read-only root filesystem (write only to /tmp).
# Mount a model repository with its servinglib.yaml at /srv/models:
#   docker build -t servinglib .
#   docker run --read-only --tmpfs /tmp -p 8080:8080 -v "$PWD":/srv/models:ro servinglib
# docs/how-to/run-the-server-image.md explains each choice.

# --- build: the wheel, from this checkout (its version from the git tag) ------------------
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN pip install --no-cache-dir "build==1.2.2" "setuptools-scm==8.1.0"
COPY . .
RUN python -m build --wheel --outdir /dist .

# --- runtime -----------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SERVINGLIB_HOST=0.0.0.0 \
    SERVINGLIB_CONFIG=/srv/models/servinglib.yaml \
    TMPDIR=/tmp
COPY --from=build /dist/ /dist/
# The CPU build of PyTorch first: a bare torch requirement from PyPI is the multi-GB CUDA one.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" \
 && pip install /dist/servinglib-*.whl"[onnx]" \
 && rm -rf /dist \
 && groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin app
WORKDIR /srv/models
USER 10001:10001
EXPOSE 8080
# Ready once every model's default version is loaded and self-tested.
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2)"]
CMD ["servinglib", "serve"]
