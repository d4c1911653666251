-- Record one step of a run atomically: the decision slot, the run record, outbox entries,
-- an audit entry, and optionally hold the saved session.
-- KEYS: 1 run hash, 2 run decision slots, 3 outbox, 4 audit list, 5 session hash
-- ARGV: 1 slot, 2 slot value, 3 run fields (JSON object), 4 outbox entries (JSON array),
--       5 audit entry (JSON), 6 the native session id to hold ('' to hold none)
-- Returns {1, ''} when recorded, {0, <value already in the slot>} for a duplicate.
local existing = claim_slot(KEYS[2], ARGV[1], ARGV[2])
if existing then
  return {0, existing}
end
hset_json(KEYS[1], ARGV[3])
outbox_put(KEYS[3], ARGV[4])
audit_push(KEYS[4], ARGV[5])
if ARGV[6] ~= '' then
  hold_session(KEYS[5], ARGV[6])
end
return {1, ''}
