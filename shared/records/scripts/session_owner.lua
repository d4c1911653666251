-- Give a session to another runner: a runner's claim or an operator's transfer (contract 10).
-- KEYS[1] session hash; KEYS[2] the session's ownership changes (same hash tag).
-- ARGV: 1 the new owner, 2 '1' when a held session refuses (a claim; an operator's transfer
--       takes a held one too), 3 the ownership entry (JSON) without its closing brace, to
--       which the script adds the previous owner and the new epoch, 4 a token ('' = none)
--       stored in `unconfirmed` with a change that is to be confirmed held (as session_commit.lua)
-- Returns {code, previous owner, epoch, revision}; code 'ok', 'unchanged' (already the owner),
-- 'not_found' (no record) or 'session_held'. A change adds 1 to the epoch, which fences the
-- previous owner's commits that carry it (`stale_epoch`), and 1 to the revision.
local cur = redis.call('HMGET', KEYS[1], 'native_session_id', 'state', 'revision', 'epoch', 'owner')
if not cur[1] then
  return {'not_found', '', 0, 0}
end
local revision = tonumber(cur[3]) or 0
local epoch = tonumber(cur[4]) or 0
local previous = cur[5] or ''
if previous == ARGV[1] then
  return {'unchanged', previous, epoch, revision}
end
if ARGV[2] == '1' and cur[2] == 'held' then
  return {'session_held', previous, epoch, revision}
end
epoch = epoch + 1
revision = revision + 1
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'epoch', epoch, 'revision', revision)
if (ARGV[4] or '') ~= '' then
  redis.call('HSET', KEYS[1], 'unconfirmed', ARGV[4])
end
local before = 'null'
if previous ~= '' then
  before = cjson.encode(previous)
end
redis.call('LPUSH', KEYS[2], ARGV[3] .. ',"previous_owner":' .. before .. ',"epoch":' .. epoch .. '}')
redis.call('LTRIM', KEYS[2], 0, 99)
return {'ok', previous, epoch, revision}
