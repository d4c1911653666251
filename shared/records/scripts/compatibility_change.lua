-- Declare or revoke a compatibility declaration, with its audit entry, in one step.
-- KEYS[1] the declarations hash (field: declaration id, value: its JSON), KEYS[2] the audit
-- list (newest first). ARGV[1] 'declare' or 'revoke', ARGV[2] the id, ARGV[3] the declaration
-- JSON (declare), ARGV[4] the audit entry JSON, ARGV[5] the audit list's length kept.
-- Returns 'ok', 'unchanged' (declared already, or nothing to revoke).
local id = ARGV[2]
if ARGV[1] == 'declare' then
  if redis.call('HSETNX', KEYS[1], id, ARGV[3]) == 0 then
    return 'unchanged'
  end
else
  if redis.call('HDEL', KEYS[1], id) == 0 then
    return 'unchanged'
  end
end
redis.call('LPUSH', KEYS[2], ARGV[4])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
return 'ok'
