#!/bin/sh
# compose's secrets, made by the one-shot service `secrets` on the first start and never
# written into compose.yaml: a throwaway CA (deploy/tls/make-dev-certs.sh) with a server
# certificate for NATS and Redis and a client certificate per process, one password per NATS
# and Redis user, the Redis ACL file (deploy/redis/complete-acl.sh), the console's sign-in token
# and Grafana's admin password. Each goes into the volume of the one container that reads it,
# owned by that container's user and readable by it alone (0600/0700):
#   /secrets/nats      the NATS server: its certificate, the users' passwords (passwords.env)
#   /secrets/redis     Redis: its certificate, users.acl, the password of its health check
#   /secrets/<service> classifier, session-store, archiver, reconciliation, console: the CA,
#                      its client certificate and key, its NATS and Redis passwords (the
#                      console: no Redis; its sign-in token, console-token; the
#                      session-store: also the NATS user `monitor`'s, nats-monitor-password)
#   /secrets/operator  for `continuity` from the host: the CA, a client certificate and the
#                      NATS user `operator`'s password (docs/operations/security.md)
#   /secrets/grafana   Grafana's admin password
# Delete the volumes (`docker compose down -v`) to make new ones.
set -eu
umask 077
root=${SECRETS_ROOT:-/secrets}
scripts=${SECRETS_SCRIPTS:-/scripts}
VOLUMES="nats redis classifier session-store archiver reconciliation console operator grafana"
made=yes
for volume in $VOLUMES; do [ -f "$root/$volume/.made" ] || made=no; done
if [ $made = yes ]; then
  echo "secrets: already made"
  exit 0
fi
command -v openssl >/dev/null 2>&1 || apk add --no-cache -q openssl

SERVICES="classifier session-store archiver reconciliation console"
STORING="classifier session-store archiver reconciliation"
NATS_USERS="classifier session-store archiver reconciliation operator console system monitor"
CONTINUITY_UID=10001   # deploy/Dockerfile
REDIS_UID=999          # the redis image's user
GRAFANA_UID=472        # the grafana image's user

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clients=""
for name in $SERVICES operator probe; do clients="$clients --client $name"; done
# shellcheck disable=SC2086
sh "$scripts/tls/make-dev-certs.sh" $clients "$work/tls" >/dev/null

secret() { openssl rand -hex 24; }
mkdir -p "$work/nats" "$work/redis-passwords"
: > "$work/nats/passwords.env"
for user in $NATS_USERS; do
  secret > "$work/nats/$user"
  variable=CONTINUITY_NATS_$(printf '%s' "$user" | tr 'a-z-' 'A-Z_')_PASSWORD
  # Quoted inside the value: nats-server reads a variable as configuration, where a bare value
  # that starts with a digit would be taken for a number.
  printf "export %s='\"%s\"'\n" "$variable" "$(cat "$work/nats/$user")" >> "$work/nats/passwords.env"
done
for user in $STORING probe; do secret > "$work/redis-passwords/$user"; done

fill() {  # fill DIR OWNER: the folder and its files for OWNER alone
  touch "$1/.made"
  # As root (in compose) the files are given to the container's user; another user cannot give
  # files away, and they stay its own.
  if [ "$(id -u)" = 0 ]; then chown -R "$2:$2" "$1"; fi
  chmod 0700 "$1"
  find "$1" -type f -exec chmod 0600 {} +
}

mkdir -p "$root/nats"
cp "$work/tls/ca.crt" "$work/tls/server.crt" "$work/tls/server.key" "$work/nats/passwords.env" "$root/nats/"
fill "$root/nats" 0

mkdir -p "$root/redis"
cp "$work/tls/ca.crt" "$work/tls/server.crt" "$work/tls/server.key" "$root/redis/"
# Its health check signs in as `probe` (PING only), with a client certificate of its own.
cp "$work/redis-passwords/probe" "$root/redis/probe-password"
cp "$work/tls/client-probe.crt" "$root/redis/probe.crt"
cp "$work/tls/client-probe.key" "$root/redis/probe.key"
sh "$scripts/redis/complete-acl.sh" "$scripts/redis/users.acl" "$work/redis-passwords" "$root/redis/users.acl"
fill "$root/redis" "$REDIS_UID"

for name in $SERVICES operator; do
  dir="$root/$name"
  mkdir -p "$dir"
  cp "$work/tls/ca.crt" "$dir/ca.crt"
  cp "$work/tls/client-$name.crt" "$dir/client.crt"
  cp "$work/tls/client-$name.key" "$dir/client.key"
  cp "$work/nats/$name" "$dir/nats-password"
  case " $STORING " in *" $name "*) cp "$work/redis-passwords/$name" "$dir/redis-password" ;; esac
  if [ "$name" = console ]; then secret > "$dir/console-token"; fi
  # The session-store alone reads the servers' connections, as the user `monitor` of SYS.
  if [ "$name" = session-store ]; then cp "$work/nats/monitor" "$dir/nats-monitor-password"; fi
  if [ "$name" = operator ]; then fill "$dir" 0; else fill "$dir" "$CONTINUITY_UID"; fi
done

mkdir -p "$root/grafana"
secret > "$root/grafana/admin-password"
fill "$root/grafana" "$GRAFANA_UID"

echo "secrets: made (the console's sign-in token: docker compose exec console cat /run/continuity/console-token)"
