-- Apply a run's decision to its bucket of the runs index, unless the bucket already holds a
-- newer one for the run: redelivered or reordered decisions never move a run back.
-- All keys share the bucket's hash tag (shared/records/keys.py, runs_index_bucket).
-- KEYS: 1 versions hash (run_id -> '<version>|<status number>'), 2 entries hash (run_id ->
--       entry JSON), 3 the bucket's sorted set of every run, 4.. one sorted set per status,
--       in the order of the status numbers (1-based)
-- ARGV: 1 run_id, 2 version (compared as text), 3 entry JSON, 4 score (the decision's time in
--       epoch seconds), 5 status number
-- Returns 1 when applied, 0 when the stored entry is as new or newer.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local sep = string.find(current, '|', 1, true)
  if string.sub(current, 1, sep - 1) >= ARGV[2] then
    return 0
  end
  redis.call('ZREM', KEYS[3 + tonumber(string.sub(current, sep + 1))], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[5])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[3 + tonumber(ARGV[5])], ARGV[4], ARGV[1])
return 1
