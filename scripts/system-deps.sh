#!/usr/bin/env bash
# System packages and loopback services the test suite needs. Idempotent: installs only what
# is missing, starts only what is not running. Called by `make test`.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# rsyslog: a real relay forwarding NF logs to the syslog receiver (tests/app/test_syslog.py)
[ -x /usr/sbin/rsyslogd ] || command -v rsyslogd >/dev/null 2>&1 || need_apt+=(rsyslog)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# NATS with JetStream on loopback (the scale-out telemetry bus; tests/app/test_bus_nats.py)
if ! command -v nats-server >/dev/null 2>&1; then
  echo "installing Debian packages: nats-server"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nats-server >/dev/null
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
  echo "starting nats-server (JetStream) on 127.0.0.1:4222"
  $SUDO mkdir -p /var/lib/nats-server
  $SUDO start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  for _ in $(seq 1 50); do
    (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && break
    sleep 0.1
  done
fi

# PostgreSQL on loopback (the store at scale; tests/app/test_storage_api.py). Machines of
# this kind have it installed with trust authentication on 127.0.0.1:5432; start it if stopped.
if ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "PostgreSQL is not installed: the storage tests need it on 127.0.0.1:5432" >&2
    exit 1
  fi
  echo "starting PostgreSQL on 127.0.0.1:5432"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  for _ in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && break
    sleep 0.1
  done
fi

# Prometheus and its Alertmanager (the metrics source and the alert sink at scale; the tests
# start their own instances on free loopback ports, so nothing is started here)
need_prom=()
command -v prometheus >/dev/null 2>&1 || need_prom+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
  || need_prom+=(prometheus-alertmanager)
if [ ${#need_prom[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_prom[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_prom[@]}" >/dev/null
fi
