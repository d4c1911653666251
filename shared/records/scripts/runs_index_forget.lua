-- Remove a run from its bucket of the runs index, only while the entry is still the one the
-- caller found stale (a newer decision applied meanwhile is kept).
-- KEYS: as runs_index_apply.lua. ARGV: 1 run_id, 2 the entry's version.
-- Returns 1 when removed, else 0.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then
  return 0
end
local sep = string.find(current, '|', 1, true)
if string.sub(current, 1, sep - 1) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[3 + tonumber(string.sub(current, sep + 1))], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
