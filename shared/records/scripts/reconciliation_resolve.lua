-- Resolve a reconciliation and record its continue_fresh decision in one atomic step, so the
-- resolution and the decision's publication cannot come apart (lib.lua prepended).
-- Of concurrent resolutions exactly one finds the record open. The session hash is never
-- touched: the saved session stays held and unchanged.
-- KEYS: those of every step script (shared/records/scripts/__init__.py, step_keys): 1 run hash,
--       2 run decision slots, 3 outbox, 4 run audit list, 5 session hash (not touched),
--       6 reconciliation hash, 7 its history list
-- ARGV: 1 action_outcome, 2 resolution (JSON), 3 slot, 4 slot value (the decision),
--       5 run fields (JSON), 6 outbox entries (JSON), 7 audit entry (JSON), 8 decision id,
--       9 the record's attempt as read by the caller, 10 retention in milliseconds,
--       11 '1' when the step waits on a person
-- Returns {'resolved'|'already_delivered'|'conflict'|'not_found'|'changed'|'slot_taken', detail,
-- ttl}; ttl is the run record's remaining time to live in milliseconds (-1: kept, -2: none).
if redis.call('EXISTS', KEYS[6]) == 0 then
  return {'not_found', '', -2}
end
local rec = redis.call('HMGET', KEYS[6], 'status', 'action_outcome', 'continue_decision_id', 'attempt')
if rec[1] == 'delivered' then
  if rec[2] == ARGV[1] then
    return {'already_delivered', rec[3] or '', redis.call('PTTL', KEYS[1])}
  end
  return {'conflict', rec[2] or '', redis.call('PTTL', KEYS[1])}
end
if rec[4] ~= ARGV[9] then
  return {'changed', '', -2}
end
if claim_slot(KEYS[2], ARGV[3], ARGV[4]) then
  return {'slot_taken', '', redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[6], 'status', 'delivered', 'action_outcome', ARGV[1], 'resolution', ARGV[2],
  'continue_decision_id', ARGV[8])
hset_json(KEYS[1], ARGV[5], ARGV[4])
outbox_put(KEYS[3], ARGV[6])
audit_push(KEYS[4], ARGV[7])
-- Delivered: the record, its history and the run's records now keep the retention.
return {'resolved', ARGV[8], retain_run(ARGV[10], ARGV[11], {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, KEYS[6], KEYS[3])}
