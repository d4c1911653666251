-- Count a run against its owner's stored runs, unless the owner holds its limit (contract 10.6).
-- KEYS[1] sorted set of the owner's runs (a runner's or a tenant's), scored by when each was
--         first counted, in milliseconds
-- ARGV: 1 run_id, 2 now (ms), 3 the run retention (ms), 4 the limit
-- Returns {1, 0} when the run is counted (now, or already), {0, <first counted of the oldest
-- run kept>} when the owner holds `limit` runs of the last retention: no run is added.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (tonumber(ARGV[2]) - tonumber(ARGV[3])))
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, 0}
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, oldest[2]}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, 0}
