#!/bin/sh
# The Redis ACL file with passwords: deploy/redis/users.acl (every user off, no password) with
# each user that has a password file in PASSWORD_DIR turned on with the SHA-256 of it:
#   deploy/redis/complete-acl.sh RULES PASSWORD_DIR [OUT]
# writes OUT (readable by its owner alone), or standard output without it.
# PASSWORD_DIR holds one file per user, named after it (classifier, session-store, archiver,
# reconciliation, probe), the password alone. A user without a file stays off. A file named
# `default` makes `default` the administrator (every command and key): only for a Helm chart
# whose replicas, Sentinels and probes sign in as `default` with that password, never given to
# a service (docs/operations/security.md). Nothing here prints a password.
set -eu
usage="usage: complete-acl.sh RULES PASSWORD_DIR [OUT]"
rules=${1:?$usage}
dir=${2:?$usage}
umask 077
if [ -n "${3:-}" ]; then
  exec > "$3.tmp"
fi

hash() {
  # The password is the file without line breaks; an empty one is refused.
  pw=$(tr -d '\r\n' < "$1")
  if [ -z "$pw" ]; then
    echo "complete-acl.sh: $1 is empty" >&2
    exit 1
  fi
  printf '%s' "$pw" | sha256sum | cut -d' ' -f1
}

while IFS= read -r line || [ -n "$line" ]; do
  name=$(printf '%s\n' "$line" | cut -d' ' -f2)
  if [ -f "$dir/$name" ]; then
    sum=$(hash "$dir/$name")
    if [ "$name" = default ]; then
      line="user default on #$sum ~* &* +@all"
    else
      line=$(printf '%s\n' "$line" | sed "s/^user $name off resetpass /user $name on resetpass #$sum /")
    fi
  fi
  printf '%s\n' "$line"
done < "$rules"
if [ -n "${3:-}" ]; then
  mv "$3.tmp" "$3"
fi
