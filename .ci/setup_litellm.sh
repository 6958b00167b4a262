#!/usr/bin/env bash
# Installs a pinned LiteLLM proxy (litellm[proxy]) into its own virtual environment in the cache, so its
# many dependencies never touch the project's environment. Pinned to 1.108.0: later releases pin proxy
# helper packages (litellm-proxy, litellm-proxy-extras post releases) that the registry does not serve.
#
# Prints one line that the real tests read from the environment:
#   GRILL_LITELLM=/path/to/venv/bin/litellm
# Usage: eval "$(bash .ci/setup_litellm.sh)"    (install logs go to stderr)
#        bash .ci/setup_litellm.sh --paths     (only print where it is or would be; installs nothing)
set -euo pipefail

LITELLM_VERSION="${LITELLM_VERSION:-1.108.0}"
CACHE_ROOT="${GRILL_CACHE:-$HOME/.cache/grill-locust}"
PYTHON="${PYTHON:-python3}"

log() { echo "setup_litellm: $*" >&2; }

venv="$CACHE_ROOT/litellm-$LITELLM_VERSION-py$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
litellm="$venv/bin/litellm"
if [ "${1:-}" = "--paths" ]; then
    echo "export GRILL_LITELLM=$litellm"
    exit 0
fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.setup_litellm.lock"
flock 9  # one install at a time per cache
if [ -x "$litellm" ] && [ -f "$venv/.installed" ]; then
    log "cached $litellm"
else
    rm -rf "$venv"
    log "installing litellm[proxy]==$LITELLM_VERSION into $venv"
    start_s=$SECONDS
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "litellm[proxy]==$LITELLM_VERSION" >&2
    "$venv/bin/python" -c "import litellm.proxy.proxy_server" >&2  # the proxy's imports all resolve
    touch "$venv/.installed"
    log "installed in $((SECONDS - start_s)) s"
fi
echo "export GRILL_LITELLM=$litellm"
