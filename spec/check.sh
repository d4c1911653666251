#!/usr/bin/env bash
# Checks the recording protocol's model (spec/protocol.pml) exhaustively with spin, in a
# temporary directory: `spin -a`, `gcc -O2 -DSAFETY`, then `./pan`. docs/protocol.md says
# what is checked and why.
#
#   spec/check.sh                     every check: the intact model at both bounds must pass,
#                                     and each guard removed must produce a counterexample
#   spec/check.sh run BOUND [GUARD]   one check, pan's whole output (BOUND: one, two)
#   spec/check.sh guards              each guard, the bound its counterexample needs, and a
#                                     name in the assertion that must then fail
#
# Needs spin and a C compiler (Debian: apt-get install spin gcc; `make tools`).
set -euo pipefail

MODEL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/protocol.pml"

# The bounds: `one` is the model's defaults (one attempt, its report re-sent, two archiver
# replicas, two operators, two crashes); `two` follows a run over two attempts.
bound_flags() {
  case "$1" in
    one) echo "" ;;
    two) echo "-DMAXATT=2 -DARCHIVERS=1 -DOPERATORS=1 -DRESEND=0" ;;
    *) echo "unknown bound: $1" >&2; return 2 ;;
  esac
}

# Each guard (a -D switch of the model that removes it), the bound that reaches the
# violation its removal allows, and a name in the assertion that must then fail (the ghost
# variable or field of the invariant: docs/protocol.md).
GUARDS="
NO_SLOT_GUARD one g_fdec
NO_ATOMIC_OUTBOX one g_fdec
NO_MSGID one g_fdec
NO_SWEEPER one g_cont
NO_CLOSED_ROWS one g_refused
NO_PENDING_ROW one g_refused
NO_READ_CHECK one s_policy
NO_HOLD two g_held
NO_DECIDE_HELD two g_held
NO_REMOTE_OK_CHECK one g_moved
NO_SINGLE_SEND one g_sent
NO_EPOCH_BUMP one g_gen
NO_EPOCH_FENCE one g_gen
NO_RESOLVE_ONCE one g_cont_rec
"

# Memory for the state space, in megabytes (the larger bound needs about 1.2 GB).
MEMLIM="${MEMLIM:-4096}"

run() {
  local bound="$1" guard="${2:-}" flags work
  flags="$(bound_flags "$bound")"
  if [ -n "$guard" ]; then
    flags="$flags -D$guard"
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/protocol-model.XXXXXX")"
  trap 'rm -rf "$work"' RETURN
  cp "$MODEL" "$work/protocol.pml"
  echo "bound: $bound; guard removed: ${guard:-none}; spin -a $flags protocol.pml"
  # shellcheck disable=SC2086  # the flags are words
  (cd "$work" && spin -a $flags protocol.pml && gcc -O2 -w -DSAFETY -DMEMLIM="$MEMLIM" -o pan pan.c)
  (cd "$work" && ./pan -m10000)
}

verdict() {
  # pan's output on stdin; prints one line, fails unless the search was complete and found
  # no error (`expect` "none"), or found a violation of the assertion naming `expect`.
  local expect="$1" label="$2" out errors states elapsed violated
  out="$(cat)"
  errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out" | head -n1)"
  states="$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' <<<"$out" | head -n1)"
  elapsed="$(sed -n 's/^pan: elapsed time \(.*\) seconds/\1/p' <<<"$out" | head -n1)"
  if [ -z "$errors" ]; then
    echo "FAIL $label: pan gave no verdict"; echo "$out"; return 1
  fi
  if [ "$expect" = none ]; then
    if [ "$errors" != 0 ] || grep -qE 'search depth too small|Search not completed|MEMLIM' <<<"$out"; then
      echo "FAIL $label: errors $errors, or the search was cut short"; echo "$out"; return 1
    fi
    echo "ok   $label: no errors, $states states, ${elapsed}s, search complete"
  else
    violated="$(grep -m1 -oE 'assertion violated.*|invalid end state.*' <<<"$out" || true)"
    if [ "$errors" = 0 ] || ! grep -q "$expect" <<<"$violated"; then
      echo "FAIL $label: no counterexample of the assertion on $expect ($states states) $violated"
      return 1
    fi
    echo "ok   $label: counterexample: $violated"
  fi
}

all() {
  local failed=0 guard bound
  for bound in one two; do
    run "$bound" | verdict none "intact model, bound $bound" || failed=1
  done
  while read -r guard bound name; do
    [ -n "$guard" ] || continue
    run "$bound" "$guard" | verdict "$name" "$guard removed, bound $bound" || failed=1
  done <<<"$GUARDS"
  return "$failed"
}

case "${1:-all}" in
  all) all ;;
  run) shift; run "$@" ;;
  guards) grep . <<<"$GUARDS" ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
