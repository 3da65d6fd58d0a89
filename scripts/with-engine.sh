#!/usr/bin/env bash
# Run a command with a Docker engine answering. If none answers, start dockerd, and stop
# that dockerd again (by its own PID) when the command ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

# The same check dd-accept makes: the docker SDK can ping the engine.
engine_answers() { .venv/bin/python -c 'import docker; docker.from_env(timeout=5).ping()' >/dev/null 2>&1; }

started_pid=""
stop_engine() {
    if [[ -n ${started_pid} ]] && kill -0 "${started_pid}" 2>/dev/null; then
        echo "• stopping the Docker engine this command started" >&2
        kill -TERM "${started_pid}" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "${started_pid}" 2>/dev/null || break; sleep 0.5; done
        kill -0 "${started_pid}" 2>/dev/null && kill -KILL "${started_pid}" 2>/dev/null || true
    fi
}

if ! engine_answers; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "dd-accept: error: no Docker engine answers and only root can start one: sudo dockerd &" >&2
        exit 2
    fi
    log_dir=${DD_ACCEPT_STATE_DIR:-${HOME}/.cache/dd-accept}
    mkdir -p "${log_dir}"
    echo "• starting the Docker engine (log: dockerd.log in the dd-accept state directory)" >&2
    dockerd --host=unix:///var/run/docker.sock >"${log_dir}/dockerd.log" 2>&1 &
    started_pid=$!
    trap stop_engine EXIT
    trap 'exit 130' INT TERM
    for _ in $(seq 1 120); do
        engine_answers && break
        kill -0 "${started_pid}" 2>/dev/null || { echo "dd-accept: error: dockerd exited; see dockerd.log: $(tail -n 3 "${log_dir}/dockerd.log" | tr '\n' ' ')" >&2; exit 2; }
        sleep 0.5
    done
    engine_answers || { echo "dd-accept: error: dockerd did not answer within 60 s" >&2; exit 2; }
fi

"$@"
