#!/bin/sh
# A throwaway CA, a server certificate and a client certificate, for development and tests only:
#   deploy/tls/make-dev-certs.sh [--only] OUT_DIR [EXTRA_DNS_NAME...]
# writes OUT_DIR/ca.crt, server.crt + server.key (for localhost, 127.0.0.1, nats, redis and the
# extra names; with --only, for the given names alone, as a cluster's certificate names its
# Service and not the address a port-forward dials) and client.crt + client.key (client
# authentication, for mutual TLS). The CA's key is deleted once both certificates are signed,
# so nothing more can be issued under it. Keys are readable by every user of OUT_DIR's
# filesystem: never use these files outside a throwaway setup (docs/operations/tls.md shows how
# to issue real ones).
set -eu

usage="usage: make-dev-certs.sh [--only] OUT_DIR [EXTRA_DNS_NAME...]"
san="DNS:localhost,IP:127.0.0.1,DNS:nats,DNS:redis"
if [ "${1:-}" = "--only" ]; then
  san=""
  shift
fi
out=${1:?$usage}
shift
if [ -z "$san" ] && [ $# -eq 0 ]; then
  echo "$usage: --only needs at least one name" >&2
  exit 2
fi
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
sign client "/CN=continuity-client" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid"

rm -f ca.key ca.srl
chmod 0644 server.key client.key
