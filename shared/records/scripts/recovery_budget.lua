-- A tenant's recovery budget in one window of the storm breaker (contract 10.6,
-- `shared.records.quotas`): a unit taken only while the budget has one, so replicas deciding
-- at the same moment never pass it together; `force` counts one whatever is left (a row that
-- spends with the budget spent), `give_back` returns a unit whose step was not recorded.
-- KEYS: 1 the window's counter
-- ARGV: 1 `take`, `force` or `give_back`, 2 the budget, 3 the counter's lifetime (ms)
-- Returns {1 taken (0 refused), the count after it}.
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == 'give_back' then
  if spent > 0 then
    spent = redis.call('DECR', KEYS[1])
  end
  return {1, spent}
end
if ARGV[1] == 'take' and spent >= tonumber(ARGV[2]) then
  return {0, spent}
end
spent = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, spent}
