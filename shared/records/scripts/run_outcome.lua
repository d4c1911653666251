-- Record how a decided attempt ended (contract 4.6): its turn completed, or it was abandoned.
-- One atomic step as `record_step` takes it (the same KEYS and common arguments), recorded
-- only while the run is still at the decided attempt and in a status that waits for it.
-- KEYS: `step_keys` (1 run hash, 2 run decision slots, 3 outbox, 4 audit list, 5 session hash,
--       6 reconciliation hash, 7 its history list)
-- ARGV: 1 slot, 2 slot value, 3 run fields (JSON object), 4 outbox entries (JSON array),
--       5 audit entry (JSON), 6 retention in milliseconds, 7 the runner whose event it is ('' for
--       the abandonment sweep: no ownership check), 8 the decided attempt, 9 the statuses the
--       run may be in, each between commas (',retrying,continued,')
-- Returns {1, '', ttl} when recorded, {0, <value already in the slot>, ttl} for a duplicate,
-- {3, 'run_not_owned', -2} for another runner's run and {4, <status>, -2} when the run has no
-- decision of that attempt waiting for an outcome (nothing is written either way).
local run = redis.call('HMGET', KEYS[1], 'runner_id', 'attempt', 'status')
if ARGV[7] ~= '' and run[1] and run[1] ~= ARGV[7] then
  -- Checked first: another runner learns nothing of the run.
  return {3, 'run_not_owned', -2}
end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {0, existing, redis.call('PTTL', KEYS[1])}
end
if not run[2] or run[2] ~= ARGV[8] or not string.find(ARGV[9], ',' .. run[3] .. ',', 1, true) then
  return {4, run[3] or '', -2}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
hset_json(KEYS[1], ARGV[3], ARGV[2])
outbox_put(KEYS[3], ARGV[4])
audit_push(KEYS[4], ARGV[5])
return {1, '', retain_run(ARGV[6], '0', {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, KEYS[6], KEYS[3])}
