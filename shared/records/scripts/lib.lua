-- Helpers prepended to every script that records a run step (see scripts/__init__.py).
-- All keys a script touches share one session's hash tag.

-- Write `value` into `slot` of `slots_key` unless the slot is taken; returns what was there.
local function claim_slot(slots_key, slot, value)
  local existing = redis.call('HGET', slots_key, slot)
  if existing then
    return existing
  end
  redis.call('HSET', slots_key, slot, value)
  return false
end

-- HSET every field of a JSON object, in one command. A field whose value is JSON true takes
-- `slot_value`: a run record's last decision is the decision its step records in the slot, so
-- the caller sends it once (shared/records/steps.py, run_fields_arg).
local function hset_json(key, fields_json, slot_value)
  if fields_json == '' then
    return
  end
  local flat = {}
  for name, value in pairs(cjson.decode(fields_json)) do
    if value == true then
      value = slot_value
    end
    flat[#flat + 1] = name
    flat[#flat + 1] = value
  end
  if #flat > 0 then
    redis.call('HSET', key, unpack(flat))
  end
end

-- Put outbox entries, a JSON array of [message id, envelope] pairs.
local function outbox_put(outbox_key, entries_json)
  if entries_json == '' then
    return
  end
  local flat = {}
  for _, entry in ipairs(cjson.decode(entries_json)) do
    flat[#flat + 1] = entry[1]
    flat[#flat + 1] = entry[2]
  end
  if #flat > 0 then
    redis.call('HSET', outbox_key, unpack(flat))
  end
end

local function audit_push(audit_key, entry)
  if entry ~= '' then
    redis.call('RPUSH', audit_key, entry)
  end
end

-- Hold a saved session for an operator: only the state changes, and only while the record
-- still saves `handle` (the session that failed to resume): a newer session committed
-- meanwhile, or an archived record (moved aside for a replacement), is left as it is.
local function hold_session(session_key, handle)
  local cur = redis.call('HMGET', session_key, 'native_session_id', 'state')
  if cur[1] ~= handle or cur[2] == 'archived' then
    return
  end
  redis.call('HSET', session_key, 'state', 'held')
end

-- Reject a saved handle (contract 3.4, as `session_reject.lua` does): only while the record
-- still saves `handle` and is neither held (evidence for an operator) nor archived (moved aside
-- for a replacement); `revision` + 1. A record already rejected is left as it is. Version-1
-- fields are not touched, so the generation binding stays as it was.
local function reject_session(session_key, handle)
  local cur = redis.call('HMGET', session_key, 'native_session_id', 'state', 'revision')
  if cur[1] ~= handle or cur[2] == 'held' or cur[2] == 'archived' or cur[2] == 'rejected' then
    return
  end
  redis.call('HSET', session_key, 'state', 'rejected', 'revision', (tonumber(cur[3]) or 0) + 1)
end

-- Retention (docs/contract-v1.md, section 9.9): set in the script that writes the keys, so no
-- key is ever without one. `ttl_ms` > 0 keeps `keys` that long from now; 0 keeps them until a
-- later step (the run waits on a person). Keys that do not exist are left alone.
local function retain(ttl_ms, keys)
  for _, key in ipairs(keys) do
    if ttl_ms > 0 then
      redis.call('PEXPIRE', key, ttl_ms)
    else
      redis.call('PERSIST', key)
    end
  end
end

-- A run's own records, kept for `retention_ms` after this step, or until a later step while
-- the run waits (`waiting` is '1' for a step that stops for an operator or a reconciliation,
-- and an open reconciliation record always waits). The session's outbox holds entries only
-- until they are published: it always keeps the retention, refreshed by every write.
-- Returns the run record's time to live in milliseconds (-1: none), which the run index
-- follows; every caller has just written the run record (`run_keys[1]`), so it exists.
local function retain_run(retention_ms, waiting, run_keys, reconciliation_key, outbox_key)
  local ttl = tonumber(retention_ms)
  if waiting == '1' or redis.call('HGET', reconciliation_key, 'status') == 'open' then
    ttl = 0
  end
  retain(ttl, run_keys)
  retain(tonumber(retention_ms), {outbox_key})
  if ttl > 0 then
    return ttl
  end
  return -1
end
