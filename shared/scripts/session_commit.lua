-- Commit a session record in one atomic step (contract 3.2).
-- KEYS[1] session hash; KEYS[2] prefix of the held-record archive key (same hash tag).
-- ARGV: 1 native_session_id, 2 adapter, 3 model, 4 cwd, 5 cursor, 6 prompt_hash,
--       7 checkpoint_policy, 8 updated_at, 9 generation ('' = clear), 10 binding stamp
--       (the first 16 lowercase hex characters of the binding: every stored value is text),
--       11 expected_revision ('' = any), 12 epoch ('' = unfenced), 13 archive retention in
--       milliseconds of the held record's copy (contract 9.9)
-- Returns {result, revision, epoch}; result is 'ok' or a conflict code, and nothing is
-- written unless it is 'ok'.
local cur = redis.call('HMGET', KEYS[1], 'revision', 'epoch', 'state', 'native_session_id')
local revision = tonumber(cur[1]) or 0
local epoch = tonumber(cur[2]) or 0
if ARGV[11] ~= '' and tonumber(ARGV[11]) ~= revision then
  return {'revision_conflict', revision, epoch}
end
if ARGV[12] ~= '' and tonumber(ARGV[12]) < epoch then
  return {'stale_epoch', revision, epoch}
end
if cur[3] == 'held' then
  if cur[4] == ARGV[1] then
    return {'session_held', revision, epoch}
  end
  -- The held record is evidence for an operator: keep it, unchanged, before it is replaced.
  redis.call('COPY', KEYS[1], KEYS[2] .. (cur[4] or ''), 'REPLACE')
  redis.call('PEXPIRE', KEYS[2] .. (cur[4] or ''), tonumber(ARGV[13]))
end
revision = revision + 1
redis.call('HSET', KEYS[1],
  'native_session_id', ARGV[1], 'adapter', ARGV[2], 'model', ARGV[3], 'cwd', ARGV[4],
  'cursor', ARGV[5], 'prompt_hash', ARGV[6], 'checkpoint_policy', ARGV[7], 'updated_at', ARGV[8],
  'revision', revision)
-- Defaults are not stored, so a record stays in Redis' compact encoding: no state is active,
-- no epoch is 0. The long-form generation fields are replaced by the compact one.
redis.call('HDEL', KEYS[1], 'state', 'compatibility_generation', 'generation_binding')
if epoch > 0 then
  redis.call('HSET', KEYS[1], 'epoch', epoch)
end
if ARGV[9] == '' then
  redis.call('HDEL', KEYS[1], 'generation')
else
  redis.call('HSET', KEYS[1], 'generation', ARGV[10] .. ARGV[9])
end
return {'ok', revision, epoch}
