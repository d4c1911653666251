-- The local move after a successful remote move, in one atomic step (contract section 5):
-- copy the session hash aside, mark it archived with epoch + 1, and record the
-- open_replacement decision (slot, run record, outbox entry, audit) and the progress.
-- KEYS: 1 run hash, 2 run decision slots, 3 outbox, 4 audit list, 5 session hash,
--       6 reconciliation hash, 7 its history list, 8 archive copy, 9 archive progress
-- ARGV: 1 slot, 2 slot value, 3 run fields (JSON object; true: the slot value), 4 outbox entries (JSON array),
--       5 audit entry (JSON), 6 the epoch the decision was built on, 7 progress fields (JSON),
--       8 run retention in milliseconds, 9 '1' when the step waits on a person,
--       10 archive retention in milliseconds
-- Returns {'recorded', '', ttl}, {'duplicate', <slot value>, ttl}, {'epoch_changed', <epoch>,
-- -2} when the session's epoch is no longer the one the decision carries, or {'session_held',
-- <epoch>, -2} when the record is held for an operator (nothing is written in either case);
-- ttl is the run record's remaining time to live in milliseconds (-1: kept).
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {'duplicate', existing, redis.call('PTTL', KEYS[1])}
end
local cur = redis.call('HMGET', KEYS[5], 'epoch', 'revision', 'state')
local epoch = tonumber(cur[1]) or 0
if epoch ~= tonumber(ARGV[6]) then
  return {'epoch_changed', string.format('%d', epoch), -2}
end
-- A held record is kept, unchanged, for an operator (I5): no step of another run archives it,
-- whatever that run's decide was answered before the hold.
if cur[3] == 'held' then
  return {'session_held', string.format('%d', epoch), -2}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  -- The copy is taken before any field changes: it is the record as it was. The session
  -- record itself never expires; its copy keeps the archive retention.
  redis.call('COPY', KEYS[5], KEYS[8], 'REPLACE')
  redis.call('PEXPIRE', KEYS[8], tonumber(ARGV[10]))
end
-- Even without a record, the raised epoch fences out a runner from before the replacement.
redis.call('HSET', KEYS[5], 'state', 'archived', 'epoch', string.format('%d', epoch + 1),
  'revision', string.format('%d', (tonumber(cur[2]) or 0) + 1))
claim_slot(KEYS[2], ARGV[1], ARGV[2])
hset_json(KEYS[1], ARGV[3], ARGV[2])
outbox_put(KEYS[3], ARGV[4])
audit_push(KEYS[4], ARGV[5])
hset_json(KEYS[9], ARGV[7])
retain(tonumber(ARGV[8]), {KEYS[9]})
return {'recorded', '', retain_run(ARGV[8], ARGV[9], {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, KEYS[6], KEYS[3])}
