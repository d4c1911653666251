-- Mark a session's saved handle rejected (contract 3.4), only if it is still the stored one.
-- KEYS[1] session hash; ARGV[1] native_session_id, ARGV[2] the rejecting runner ('' for the
-- services' own account), ARGV[3] a token ('' = none) stored in `unconfirmed` with the change
-- when it is to be confirmed held (WAIT or WAITAOF; as session_commit.lua). Returns 1 when
-- cleared, else 0: also for another runner's session.
-- Version-1 fields are left alone, so the generation binding is not disturbed; a held or
-- archived record is already out of resumption and stays as it is.
local cur = redis.call('HMGET', KEYS[1], 'native_session_id', 'state', 'revision', 'owner')
if ARGV[2] ~= '' and (cur[4] or '') ~= '' and cur[4] ~= ARGV[2] then
  return 0
end
if cur[1] ~= ARGV[1] then
  return 0
end
if cur[2] == 'held' or cur[2] == 'archived' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'rejected', 'revision', (tonumber(cur[3]) or 0) + 1)
if (ARGV[3] or '') ~= '' then
  redis.call('HSET', KEYS[1], 'unconfirmed', ARGV[3])
end
return 1
