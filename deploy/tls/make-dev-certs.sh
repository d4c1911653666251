#!/bin/sh
# A throwaway CA, a server certificate and client certificates, for development and tests only:
#   deploy/tls/make-dev-certs.sh [--only] [--client NAME]... OUT_DIR [EXTRA_DNS_NAME...]
# writes OUT_DIR/ca.crt, server.crt + server.key (for localhost, 127.0.0.1, nats, redis and the
# extra names; with --only, for the given names alone, as a cluster's certificate names its
# Service and not the address a port-forward dials) and a client certificate (client
# authentication, for mutual TLS): client.crt + client.key, or with --client one per NAME,
# client-NAME.crt + client-NAME.key (subject CN=NAME), so that each process holds a key of its
# own. The CA's key is deleted once every certificate is signed, so nothing more can be issued
# under it. Keys are readable by their owner only (0600) and the folder by its owner only;
# never use these files outside a throwaway setup (docs/operations/tls.md shows how to issue
# real ones).
set -eu

usage="usage: make-dev-certs.sh [--only] [--client NAME]... OUT_DIR [EXTRA_DNS_NAME...]"
san="DNS:localhost,IP:127.0.0.1,DNS:nats,DNS:redis"
clients=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) san=""; shift ;;
    --client)
      case "${2:-}" in
        ""|*[!A-Za-z0-9._-]*) echo "$usage: --client needs a name of letters, digits, '.', '_', '-'" >&2; exit 2 ;;
      esac
      clients="$clients $2"; shift 2 ;;
    *) break ;;
  esac
done
out=${1:?$usage}
shift
if [ -z "$san" ] && [ $# -eq 0 ]; then
  echo "$usage: --only needs at least one name" >&2
  exit 2
fi
umask 077
mkdir -p "$out"
cd "$out"

for name in "$@"; do
  san="${san:+$san,}DNS:$name"
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=Continuity development CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.crt

sign() {  # sign NAME SUBJECT EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 30 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

sign server "/CN=continuity-server" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=$san"
client_extensions="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid"
if [ -z "$clients" ]; then
  sign client "/CN=continuity-client" "$client_extensions"
else
  for name in $clients; do
    sign "client-$name" "/CN=$name" "$client_extensions"
  done
fi

rm -f ca.key ca.srl
chmod 0600 ./*.key
chmod 0644 ./*.crt
