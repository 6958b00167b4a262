#!/bin/bash
# Run once by the influxdb:2 image after its first-start setup (/docker-entrypoint-initdb.d):
# maps database "$DOCKER_INFLUXDB_INIT_BUCKET" / retention policy "autogen" to the bucket, so Grafana
# (and anything else speaking InfluxQL) can query it. The token comes from the environment only.
set -euo pipefail
export INFLUX_TOKEN="${DOCKER_INFLUXDB_INIT_ADMIN_TOKEN}"
influx v1 dbrp create \
  --org "${DOCKER_INFLUXDB_INIT_ORG}" \
  --bucket-id "${DOCKER_INFLUXDB_INIT_BUCKET_ID}" \
  --db "${DOCKER_INFLUXDB_INIT_BUCKET}" \
  --rp autogen \
  --default
echo "DBRP mapping: database ${DOCKER_INFLUXDB_INIT_BUCKET} -> bucket ${DOCKER_INFLUXDB_INIT_BUCKET_ID}"
