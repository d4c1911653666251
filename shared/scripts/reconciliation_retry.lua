-- An operator's retry of a run stopped with `operator`: check the run's state and record the
-- continue_fresh decision in one atomic step (lib.lua prepended). The session hash is not a
-- key: the saved session stays held and unchanged.
-- KEYS: 1 run hash, 2 run decision slots, 3 outbox, 4 run audit list, 5 reconciliation hash
-- ARGV: 1 the run's attempt as read by the caller, 2 slot, 3 slot value (the decision),
--       4 run fields (JSON), 5 outbox entries (JSON), 6 audit entry (JSON)
-- Returns {'retried'|'not_found'|'reconciliation_required'|'already_delivered'|'not_stopped'|
--          'changed', detail}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_found', ''}
end
local run = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if run[1] == 'reconciling' or redis.call('HGET', KEYS[5], 'status') == 'open' then
  return {'reconciliation_required', ''}
end
if run[2] ~= ARGV[1] then
  return {'changed', ''}
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {'already_delivered', ''}
end
if run[1] ~= 'operator' then
  return {'not_stopped', run[1] or ''}
end
claim_slot(KEYS[2], ARGV[2], ARGV[3])
hset_json(KEYS[1], ARGV[4])
outbox_put(KEYS[3], ARGV[5])
audit_push(KEYS[4], ARGV[6])
return {'retried', ''}
