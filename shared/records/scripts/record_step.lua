-- Record one step of a run atomically: the decision slot, the run record, outbox entries,
-- an audit entry, and optionally hold the saved session or reject its handle.
-- KEYS: 1 run hash, 2 run decision slots, 3 outbox, 4 audit list, 5 session hash,
--       6 reconciliation hash, 7 its history list
-- ARGV: 1 slot, 2 slot value, 3 run fields (JSON object; true: the slot value), 4 outbox entries (JSON array),
--       5 audit entry (JSON), 6 the native session id to hold ('' to hold none),
--       7 '1' when 8 and 9 are the session's checkpoint_policy and epoch the step was decided on,
--       10 retention in milliseconds, 11 '1' when the step waits on a person, 12 the runner
--       whose event the step answers ('' when no runner's: no ownership check),
--       13 the native session id to reject ('' to reject none; contract 3.4)
-- Returns {1, '', ttl} when recorded, {0, <value already in the slot>, ttl} for a duplicate,
-- {2, '', -2} when the session changed since it was read (nothing is written: decide
-- again), and {3, <reason>, -2} when the run or the session belongs to another runner
-- (contract 10.4; nothing is written); ttl is the run record's remaining time to live in
-- milliseconds (-1: kept).
if ARGV[12] ~= '' then
  -- Checked before the slot: another runner's event learns nothing of the run's decisions.
  local run_owner = redis.call('HGET', KEYS[1], 'runner_id')
  if run_owner and run_owner ~= ARGV[12] then
    return {3, 'run_not_owned', -2}
  end
  local session_owner = redis.call('HGET', KEYS[5], 'owner')
  if session_owner and session_owner ~= '' and session_owner ~= ARGV[12] then
    return {3, 'session_not_owned', -2}
  end
end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {0, existing, redis.call('PTTL', KEYS[1])}
end
if ARGV[7] == '1' then
  local cur = redis.call('HMGET', KEYS[5], 'checkpoint_policy', 'epoch')
  if (cur[1] or '') ~= ARGV[8] or (tonumber(cur[2]) or 0) ~= tonumber(ARGV[9]) then
    return {2, '', -2}
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])  -- the slot is free: checked above
hset_json(KEYS[1], ARGV[3], ARGV[2])
outbox_put(KEYS[3], ARGV[4])
audit_push(KEYS[4], ARGV[5])
if ARGV[6] ~= '' then
  hold_session(KEYS[5], ARGV[6])
end
if ARGV[13] ~= '' then
  reject_session(KEYS[5], ARGV[13])
end
return {1, '', retain_run(ARGV[10], ARGV[11], {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, KEYS[6], KEYS[3])}
