-- An operator's retry of a run stopped with `operator`: check the run's state and record the
-- continue_fresh decision in one atomic step (lib.lua prepended). The session hash is never
-- touched: the saved session stays held and unchanged.
-- KEYS: those of every step script (shared/records/scripts/__init__.py, step_keys): 1 run hash,
--       2 run decision slots, 3 outbox, 4 run audit list, 5 session hash (not touched),
--       6 reconciliation hash, 7 its history list
-- ARGV: 1 the run's attempt as read by the caller, 2 slot, 3 slot value (the decision),
--       4 run fields (JSON), 5 outbox entries (JSON), 6 audit entry (JSON),
--       7 retention in milliseconds, 8 '1' when the step waits on a person
-- Returns {'retried'|'not_found'|'reconciliation_required'|'already_delivered'|'not_stopped'|
--          'changed', detail, ttl}; ttl is the run record's remaining time to live in
-- milliseconds (-1: kept, -2: nothing was recorded).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_found', '', -2}
end
local run = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if run[1] == 'reconciling' or redis.call('HGET', KEYS[6], 'status') == 'open' then
  return {'reconciliation_required', '', -2}
end
if run[2] ~= ARGV[1] then
  return {'changed', '', -2}
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {'already_delivered', '', -2}
end
if run[1] ~= 'operator' then
  return {'not_stopped', run[1] or '', -2}
end
claim_slot(KEYS[2], ARGV[2], ARGV[3])
hset_json(KEYS[1], ARGV[4], ARGV[3])
outbox_put(KEYS[3], ARGV[5])
audit_push(KEYS[4], ARGV[6])
return {'retried', '', retain_run(ARGV[7], ARGV[8], {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, KEYS[6], KEYS[3])}
