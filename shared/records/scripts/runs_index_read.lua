-- Read a slice of one bucket of the runs index with each run's entry, in one round trip.
-- KEYS: 1 a sorted set of the bucket (every run, or one status), 2 the bucket's entries hash
-- ARGV: 1 lowest score (inclusive), 2 highest score ('+inf' or '(<score>'), 3 offset, 4 count
-- Returns a flat array: member, score, entry JSON (false when missing), ...
local rows = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', ARGV[3], ARGV[4])
local out = {}
for i = 1, #rows, 2 do
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], rows[i])
end
return out
