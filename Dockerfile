# grill-locust: one image for the Locust master, its workers and the simulated engine (`grill sim`).
#   docker build -t grill-locust .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# the package first: its dependencies change less often than the scenarios. gcc only for the
# install: it builds the client's C read (grill_locust/client/_fastread.c), ~20 % less CPU per event.
# The sources go once installed, so that nothing imports the copy without the built module.
COPY pyproject.toml setup.py ./
COPY grill_locust ./grill_locust
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . && rm -rf grill_locust \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && python -c "from grill_locust.client import _fastread" \
    && useradd --create-home --uid 10001 grill

COPY locustfiles ./locustfiles
COPY scenarios ./scenarios
COPY deploy/scenarios ./deploy/scenarios
RUN mkdir -p /app/results && chown grill:grill /app/results

USER grill
# 8089: Locust web UI (master), 5557: master <-> workers, 8000: `grill sim`
EXPOSE 8089 5557 8000
CMD ["locust", "-f", "locustfiles/coding.py", "--help"]
