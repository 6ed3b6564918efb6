# One image for every somatize-tasks service in docker-compose.yml: workers,
# Flower and the example producer. Build: docker build -t somatize-tasks .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
COPY somatize_tasks ./somatize_tasks
RUN pip install . \
 && useradd --create-home --uid 1000 somatize

# Celery refuses to be comfortable as root; the worker has no need for it.
USER somatize
CMD ["somatize-tasks", "--help"]
