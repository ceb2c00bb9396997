# One image for every walfeed process; the command picks the process (walfeed api|relay|worker|migrate).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY services ./services
COPY db ./db
RUN pip install --no-cache-dir -e '.[otel]'
USER nobody
ENTRYPOINT ["walfeed"]
