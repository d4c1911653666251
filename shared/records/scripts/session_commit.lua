-- Commit a session record in one atomic step (contract 3.2), bound to its owner (section 10).
-- KEYS[1] session hash; KEYS[2] prefix of the held-record archive key; KEYS[3] the session's
-- ownership changes (all under the session's hash tag).
-- ARGV: 1 native_session_id, 2 adapter, 3 model, 4 cwd, 5 cursor, 6 prompt_hash,
--       7 checkpoint_policy, 8 updated_at, 9 generation ('' = clear), 10 binding stamp
--       (the binding's first 64 bits as 11 base64url characters: every stored value is text),
--       11 expected_revision ('' = any), 12 epoch ('' = unfenced), 13 archive retention in
--       milliseconds of the held record's copy (contract 9.9), 14 the committing runner ('' for
--       the services' own account: no owner check, no binding), 15 the ownership entry (JSON
--       without its closing brace: the script adds the epoch) written when this commit binds
--       the session to that runner, 16 the generation's components ('' = none): the binding
--       stamp's first 7 characters, then 9 fingerprints of 6 characters in name order
--       ('......' for a missing component); the script puts between them the mask of the
--       components that changed at the commit that last changed the generation (3 hex digits,
--       0 = not known), so the stored field is 64 characters (contract 9.6), 17 a token
--       ('' = none) stored in `unconfirmed` when the commit is to be confirmed held (WAIT or
--       WAITAOF after it): until the session-store clears it, a read confirms before answering
-- Returns {result, revision, epoch}; result is 'ok' or a conflict code, and nothing is
-- written unless it is 'ok'.
local cur = redis.call('HMGET', KEYS[1], 'revision', 'epoch', 'state', 'native_session_id', 'owner',
  'g', 'components', 'generation')
local revision = tonumber(cur[1]) or 0
local epoch = tonumber(cur[2]) or 0
local owner = cur[5] or ''
-- Checked first: another runner learns nothing of the record, not even its revision.
if ARGV[14] ~= '' and owner ~= '' and owner ~= ARGV[14] then
  return {'session_not_owned', 0, 0}
end
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
if ARGV[17] ~= '' then
  redis.call('HSET', KEYS[1], 'unconfirmed', ARGV[17])
end
-- Defaults are not stored, so a record stays in Redis' compact encoding: no state is active,
-- no epoch is 0. The generation's older forms (the `generation` field of earlier releases, the
-- long form) are replaced by `g`.
redis.call('HDEL', KEYS[1], 'state', 'generation', 'compatibility_generation', 'generation_binding')
if epoch > 0 then
  redis.call('HSET', KEYS[1], 'epoch', epoch)
end
if ARGV[14] ~= '' and owner == '' then
  -- The first runner to commit the session owns it.
  redis.call('HSET', KEYS[1], 'owner', ARGV[14])
  redis.call('LPUSH', KEYS[3], ARGV[15] .. ',"epoch":' .. epoch .. '}')
  redis.call('LTRIM', KEYS[3], 0, 99)
end
if ARGV[9] == '' then
  redis.call('HDEL', KEYS[1], 'g', 'components')
  return {'ok', revision, epoch}
end
redis.call('HSET', KEYS[1], 'g', ARGV[10] .. ARGV[9])
if ARGV[16] == '' then
  if cur[7] then
    redis.call('HDEL', KEYS[1], 'components')
  end
  return {'ok', revision, epoch}
end
-- Which components changed: read from the stored fingerprints when they were committed with
-- the stored generation (their tag opens its stamp), compared with this commit's. A record an
-- earlier release committed last holds it in `generation`, after a stamp of 16 characters
-- (this script removes that field, so with both present, `generation` is the later).
local old_generation, stamp_chars = cur[8], 16
if not old_generation then
  old_generation, stamp_chars = cur[6] or '', 11
end
local old = cur[7] or ''
local mask = 0
if #old == 64 and string.sub(old, 1, 7) == string.sub(old_generation, 1, 7) then
  if string.sub(old_generation, stamp_chars + 1) == ARGV[9] then
    mask = tonumber(string.sub(old, 8, 10), 16) or 0  -- the same generation: the last change stands
  else
    for i = 0, 8 do
      if string.sub(old, 11 + 6 * i, 16 + 6 * i) ~= string.sub(ARGV[16], 8 + 6 * i, 13 + 6 * i) then
        mask = mask + 2 ^ i
      end
    end
  end
end
redis.call('HSET', KEYS[1], 'components',
  string.sub(ARGV[16], 1, 7) .. string.format('%03x', mask) .. string.sub(ARGV[16], 8))
return {'ok', revision, epoch}
