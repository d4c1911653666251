-- Lease tokens from an event-rate bucket shared by every classifier replica (contract 10.6,
-- `shared.records.quotas.lease`). The bucket holds up to `burst` tokens and gains `rate` a
-- second on the server's clock, so replicas with skewed clocks share one bucket.
-- KEYS: 1 the bucket (hash: tokens, at in ms)
-- ARGV: 1 rate (tokens a second), 2 burst, 3 tokens wanted (at least 1)
-- Returns {granted, wait_ms}: up to `wanted` whole tokens taken; with none, the milliseconds
-- until one is there again.
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local saved = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = burst
if saved[1] and saved[2] then
  local elapsed = math.max(0, now - tonumber(saved[2]))
  tokens = math.min(burst, tonumber(saved[1]) + elapsed * rate / 1000)
end
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
local wait = 0
if granted < 1 then
  wait = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%d', now))
-- Gone once it would be full again: an absent bucket is a full one.
local ttl = math.min(86400000, math.ceil((burst - tokens) * 1000 / rate) + 1000)
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
return {granted, wait}
