-- Start, or find, the archive of one archive_id (contract section 5: at most one remote move).
-- KEYS: 1 archive progress hash, 2 run decision slots
-- ARGV: 1 slot, 2 lease in milliseconds, 3 progress fields (JSON object), 4 retention in
--       milliseconds (the progress is a record of the run: section 9.9)
-- Returns {state, lease_left_ms}:
--   'decided'          the slot is recorded: nothing is left to do but publishing;
--   'send'             progress was absent and is now 'remote_started': the caller, and only
--                      the caller, sends the remote move;
--   'remote_started'   a move was sent and its result is not recorded; lease_left_ms > 0
--                      while its sender may still be waiting for the runner;
--   'remote_ok', 'remote_failed', 'done'   the recorded result of the move.
-- Times come from the server's clock, so replicas with skewed clocks agree on the lease.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {'decided', 0}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  hset_json(KEYS[1], ARGV[3])
  redis.call('HSET', KEYS[1], 'state', 'remote_started',
    'remote_started_ms', string.format('%d', now_ms),
    'lease_until_ms', string.format('%d', now_ms + tonumber(ARGV[2])))
  retain(tonumber(ARGV[4]), {KEYS[1]})
  return {'send', tonumber(ARGV[2])}
end
if state == 'remote_started' then
  local lease_until = tonumber(redis.call('HGET', KEYS[1], 'lease_until_ms')) or 0
  return {state, lease_until - now_ms}
end
return {state, 0}
