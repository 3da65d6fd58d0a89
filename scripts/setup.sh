#!/usr/bin/env bash
# Install what dd-accept needs on a Debian machine, only what is missing, then the venv.
# Idempotent: a second run installs nothing and takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the HTML report's browser test
command -v jq >/dev/null 2>&1 || missing+=(jq)  # the SUT's own launch path reads a manifest with it (a test)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "dd-accept: error: missing ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
        exit 2
    fi
    echo "• installing ${missing[*]} with apt" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=.venv/.dd-accept-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]]; then
    echo "• creating .venv" >&2
    python3 -m venv .venv
fi
if [[ ! -f ${stamp} || $(cat "${stamp}") != "${wanted}" ]]; then
    echo "• installing dd-accept and its dependencies into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e '.[test]'
    echo "${wanted}" >"${stamp}"
fi
