-- Open a run's reconciliation record once (lib.lua prepended). An open record, its history
-- and the run's audit trail are kept without a time to live until it is delivered (9.9).
-- KEYS: 1 reconciliation hash, 2 run audit list, 3 history list of earlier records of the run
-- ARGV: 1 attempt, 2 record fields (JSON object of strings), 3 audit entry (JSON)
-- Returns {'opened'|'reopened'|'exists', <stored opened_at>}.
local stored_attempt = redis.call('HGET', KEYS[1], 'attempt')
local result = 'opened'
if stored_attempt then
  -- A redelivered work item, or one for an earlier attempt: the record stays as it is.
  -- An open record is never replaced: an operator may be looking at it.
  if tonumber(stored_attempt) >= tonumber(ARGV[1]) or redis.call('HGET', KEYS[1], 'status') ~= 'delivered' then
    return {'exists', redis.call('HGET', KEYS[1], 'opened_at')}
  end
  -- A later attempt of a run whose earlier reconciliation was delivered: keep the earlier
  -- record (with its evidence) in the history, then open the new one.
  local flat = redis.call('HGETALL', KEYS[1])
  local earlier = {}
  for i = 1, #flat, 2 do
    earlier[flat[i]] = flat[i + 1]
  end
  redis.call('RPUSH', KEYS[3], cjson.encode(earlier))
  redis.call('DEL', KEYS[1])
  result = 'reopened'
end
hset_json(KEYS[1], ARGV[2])
audit_push(KEYS[2], ARGV[3])
retain(0, {KEYS[1], KEYS[2], KEYS[3]})
return {result, redis.call('HGET', KEYS[1], 'opened_at')}
