-- Count a new run against its owners' stored runs (contract 10.6,
-- `shared.records.quotas.count_run`): the check and the count in one step, so replicas
-- counting at the same moment never pass a limit together. One owner per call on Redis
-- Cluster (each set has a tag of its own); all of a run's owners in one call on a single server.
-- KEYS: 1..n the owners' sorted sets (member run_id, score when counted, ms)
-- ARGV: 1 run_id, 2 now (ms), 3 the retention (ms), 4..3+n each owner's limit
-- Returns per owner, in KEYS order, {1, 0} counted now, {2, 0} counted before, {0, oldest score}
-- refused at the limit; when any owner refuses, nothing is counted anywhere and the others
-- answer {3, 0} (not counted). A run counted and then not kept is taken back with a ZREM.
local run_id = ARGV[1]
local now, run_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local floor = '(' .. string.format('%d', now - run_ms)
local answers, refused = {}, false
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', floor)
  if redis.call('ZSCORE', key, run_id) then
    answers[i] = {2, 0}
  elseif redis.call('ZCARD', key) >= tonumber(ARGV[3 + i]) then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    answers[i] = {0, oldest[2] or ARGV[2]}
    refused = true
  else
    answers[i] = {1, 0}
  end
end
for i, key in ipairs(KEYS) do
  if answers[i][1] == 1 then
    if refused then
      answers[i] = {3, 0}
    else
      redis.call('ZADD', key, ARGV[2], run_id)
      redis.call('PEXPIRE', key, ARGV[3])
    end
  end
end
if #KEYS == 1 then
  return answers[1]
end
return answers
