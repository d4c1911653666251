-- A finished run's records, copied to CONTINUITY_HISTORY, are given the linger (contract 9.14):
-- they stay a short time for a report sent again (9.13) and then expire, the stream keeping
-- them for the retention. Only the run as it was copied: a step recorded since (the run's
-- status or audit length changed) or an open reconciliation leaves everything as it is.
-- KEYS: `step_keys` (1 run hash, 2 run decision slots, 3 outbox, 4 audit list, 5 session hash,
--       6 reconciliation hash, 7 its history list), then 8... the archive progress of each
--       attempt (the archiver's working state: not copied, given the linger all the same)
-- ARGV: 1 the status copied, 2 the audit length copied, 3 the linger in milliseconds
-- Returns {1, ttl of the run record} when given the linger, {0, -2} when the run changed.
local status = redis.call('HGET', KEYS[1], 'status')
if not status or status ~= ARGV[1] or redis.call('LLEN', KEYS[4]) ~= tonumber(ARGV[2]) then
  return {0, -2}
end
if redis.call('HGET', KEYS[6], 'status') == 'open' then
  return {0, -2}
end
local linger = tonumber(ARGV[3])
local lingering = {KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}
for i = 8, #KEYS do
  lingering[#lingering + 1] = KEYS[i]
end
for _, key in ipairs(lingering) do
  local ttl = redis.call('PTTL', key)
  if ttl == -1 or ttl > linger then
    redis.call('PEXPIRE', key, linger)
  end
end
redis.call('HSET', KEYS[1], 'history', '1')
return {1, redis.call('PTTL', KEYS[1])}
