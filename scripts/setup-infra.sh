#!/usr/bin/env bash
# Make this machine's PostgreSQL and RabbitMQ ready for walfeed. Idempotent: run it as often as you like.
#
#   - installs the wal2json output plugin (Debian: postgresql-<ver>-wal2json) if it is missing;
#   - configures the local Debian cluster: wal_level=logical, room for replication slots and WAL senders, then
#     restarts or reloads it as needed. pg_hba.conf is never widened: logical replication connections name a
#     database and match its ordinary lines (PostgreSQL >= 10), so no `replication` line is needed. The
#     `replication ... trust` lines earlier versions of this script appended are removed (exact text only);
#   - starts PostgreSQL and RabbitMQ if they are installed but not running, and checks both answer.
#
# Machines without a Debian-managed cluster: point WALFEED_DATABASE_URL at a server with wal_level=logical and
# wal2json (compose.yaml has one) and set WALFEED_SKIP_INFRA=1.
set -euo pipefail

say() { echo "setup-infra: $*"; }
die() { echo "setup-infra: ERROR: $*" >&2; exit 1; }

if [[ "${WALFEED_SKIP_INFRA:-0}" == 1 ]]; then
  say "WALFEED_SKIP_INFRA=1: leaving PostgreSQL and RabbitMQ as they are"
  exit 0
fi

as_root() { if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  die "need root for: $* (run as root or install sudo)"; fi; }

[[ -d /etc/postgresql ]] || die "no Debian PostgreSQL cluster in /etc/postgresql. Install postgresql-15, or set \
WALFEED_DATABASE_URL to a server with wal_level=logical and wal2json and WALFEED_SKIP_INFRA=1"
PGVER=${WALFEED_PG_VERSION:-$(ls /etc/postgresql | sort -V | tail -n 1)}
CLUSTER=${WALFEED_PG_CLUSTER:-main}
CONF_DIR=/etc/postgresql/$PGVER/$CLUSTER
[[ -f $CONF_DIR/postgresql.conf ]] || die "cluster $PGVER/$CLUSTER not found in $CONF_DIR"
pgsql() { as_root runuser -u postgres -- psql -X -qAt -d postgres "$@"; }

# 1. wal2json
if [[ ! -f /usr/lib/postgresql/$PGVER/lib/wal2json.so ]]; then
  say "installing postgresql-$PGVER-wal2json"
  as_root apt-get update -qq || die "apt-get update failed"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$PGVER-wal2json" \
    || die "could not install postgresql-$PGVER-wal2json"
else
  say "wal2json present"
fi

# 2. PostgreSQL running
pg_running() { pg_lsclusters -h "$PGVER" "$CLUSTER" 2>/dev/null | awk '{print $4}' | grep -qx online; }
pgctl() { as_root pg_ctlcluster --skip-systemctl-redirect "$PGVER" "$CLUSTER" "$1"; }
wait_pg() {
  for _ in $(seq 1 120); do pg_isready -q -h 127.0.0.1 -p "$(pg_conftool -s "$PGVER" "$CLUSTER" show port 2>/dev/null || echo 5432)" && return 0; sleep 0.5; done
  die "PostgreSQL $PGVER/$CLUSTER did not become ready in 60 s; see /var/log/postgresql/"
}
if ! pg_running; then
  say "starting PostgreSQL $PGVER/$CLUSTER"
  pgctl start || die "could not start PostgreSQL $PGVER/$CLUSTER; see /var/log/postgresql/"
fi
wait_pg

# 3. configuration (a conf.d drop-in, so the packaged postgresql.conf stays untouched)
if ! grep -Eq "^\s*include_dir\s*=\s*'conf.d'" "$CONF_DIR/postgresql.conf"; then
  die "$CONF_DIR/postgresql.conf has no include_dir = 'conf.d'; add it, or set wal_level=logical and the values below yourself"
fi
DROPIN=$CONF_DIR/conf.d/60-walfeed.conf
WANT=$(cat <<'CONF'
# written by walfeed scripts/setup-infra.sh
wal_level = logical
max_replication_slots = 200   # the test suite gives every test its own slot
max_wal_senders = 200
max_connections = 400
wal_sender_timeout = 60s
CONF
)
# Some builds only load output plugins named in output_plugin_libraries: add wal2json to that list.
if [[ -n "$(pgsql -c "SELECT 1 FROM pg_settings WHERE name = 'output_plugin_libraries'" 2>/dev/null)" ]]; then
  current=$(pgsql -c "SHOW output_plugin_libraries")
  if [[ ",${current// /}," != *",wal2json,"* ]]; then current="${current:+$current, }wal2json"; fi
  WANT="$WANT"$'\n'"output_plugin_libraries = '$current'"
fi
if [[ ! -f $DROPIN ]] || [[ "$(cat "$DROPIN")" != "$WANT" ]]; then
  say "writing $DROPIN"
  echo "$WANT" | as_root tee "$DROPIN" >/dev/null
  conf_changed=1
fi

HBA=$CONF_DIR/pg_hba.conf
conf_changed=${conf_changed:-0}
# Earlier versions of this script appended exactly these lines (any local OS user could open a replication
# connection as any role, the superuser included, without a password). Remove those exact lines and nothing else:
# a line an administrator wrote, even a similar one, is theirs to keep. Removing lines only narrows access.
old_lines=(-e "local   replication     all                                     trust"
           -e "host    replication     all             127.0.0.1/32            trust"
           -e "host    replication     all             ::1/128                 trust")
if as_root grep -qxF "${old_lines[@]}" "$HBA"; then
  say "removing from $HBA the replication trust lines earlier versions of this script added"
  as_root cp -p "$HBA" "$HBA.walfeed-backup"
  kept=$(as_root grep -vxF "${old_lines[@]}" "$HBA" || true)
  printf '%s\n' "$kept" | as_root tee "$HBA" >/dev/null  # in place: owner and mode stay
  conf_changed=1
fi

# 4. apply: reload, then restart if a changed setting needs it (wal_level does)
if [[ $conf_changed == 1 ]]; then
  say "reloading PostgreSQL configuration"
  pgctl reload
fi
if [[ "$(pgsql -c 'SHOW wal_level')" != logical ]] || [[ -n "$(pgsql -c 'SELECT name FROM pg_settings WHERE pending_restart')" ]]; then
  say "restarting PostgreSQL $PGVER/$CLUSTER to apply wal_level=logical"
  pgctl restart || die "could not restart PostgreSQL; see /var/log/postgresql/"
  wait_pg
fi
[[ "$(pgsql -c 'SHOW wal_level')" == logical ]] || die "wal_level is still not logical after a restart"

# 5. a login role for the current OS user (the default URL postgresql:///walfeed connects as that user)
me=$(id -un)
if [[ "$(pgsql -c "SELECT count(*) FROM pg_roles WHERE rolname = '$me'")" == 0 ]]; then
  say "creating superuser role $me"
  pgsql -c "CREATE ROLE \"$me\" LOGIN SUPERUSER REPLICATION"
fi
say "PostgreSQL $PGVER/$CLUSTER: wal_level=logical, wal2json installed"

# 6. RabbitMQ
amqp_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if ! amqp_up; then
  command -v rabbitmq-server >/dev/null || die "RabbitMQ is not reachable on 127.0.0.1:5672 and not installed \
(apt-get install rabbitmq-server, or set WALFEED_AMQP_URL)"
  say "starting RabbitMQ"
  as_root rabbitmq-server -detached || true
  for _ in $(seq 1 120); do amqp_up && break; sleep 0.5; done
  amqp_up || die "RabbitMQ did not open 127.0.0.1:5672 in 60 s; see /var/log/rabbitmq/"
fi
say "RabbitMQ reachable on 127.0.0.1:5672"

# 7. Monitoring checks (tests/unit/test_monitoring.py): promtool, from Debian's prometheus package. Only the
#    promtool binary is taken out of the package (a static Go program): installing the package would also install
#    and start a Prometheus server on this machine.
if ! command -v promtool >/dev/null; then
  say "installing promtool (from Debian's prometheus package, without the server)"
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  (cd "$dl" && as_root apt-get download prometheus >/dev/null 2>&1) \
    || { as_root apt-get update -qq && (cd "$dl" && as_root apt-get download prometheus >/dev/null 2>&1); } \
    || die "could not download Debian's prometheus package for promtool"
  dpkg-deb -x "$dl"/prometheus_*.deb "$dl/x" || die "could not unpack the prometheus package"
  as_root install -m 0755 "$dl/x/usr/bin/promtool" /usr/local/bin/promtool
fi
say "promtool present ($(promtool --version 2>&1 | head -n 1))"

# 8. RabbitMQ's Prometheus plugin: per-queue depths and consumers on port 15692, which deploy/prometheus/alerts.yml
#    and the dashboard use. Enabling it starts no new broker and restarts nothing.
if command -v rabbitmq-plugins >/dev/null; then
  if ! as_root rabbitmq-plugins list -e -m 2>/dev/null | grep -qx rabbitmq_prometheus; then
    say "enabling rabbitmq_prometheus"
    as_root rabbitmq-plugins enable rabbitmq_prometheus >/dev/null || die "could not enable rabbitmq_prometheus"
  fi
  say "rabbitmq_prometheus enabled (queue metrics on 127.0.0.1:15692)"
fi

# 9. systemd-analyze, to verify deploy/systemd's units (tests/unit/test_systemd.py). Installing Debian's systemd
#    package does not make it PID 1: nothing is started.
if ! command -v systemd-analyze >/dev/null; then
  say "installing systemd (for systemd-analyze verify)"
  as_root apt-get update -qq || die "apt-get update failed"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd \
    || die "could not install systemd"
fi
