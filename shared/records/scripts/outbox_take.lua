-- Take outbox entries for one publisher at a time (shared/records/outbox.py, `Outbox.take`).
-- An entry recorded less than a grace period ago is its recorder's to publish (it publishes right
-- after its step); one recorded at or before the cutoff was left by a recorder presumed gone, and
-- is taken: its `recorded_at` becomes now, so another taker (a re-sent report, a sweeper of any
-- replica) leaves it alone for a grace period while this one publishes and deletes it.
-- KEYS: 1 a session's outbox hash
-- ARGV: 1 the cutoff and 2 now (seconds since the epoch), 3.. message ids
-- Returns a flat list of the entries taken: msg id, entry (as now stored), ...
local cutoff, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local taken = {}
for i = 3, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local ok, entry = pcall(cjson.decode, raw)
    -- An unreadable entry is left where it is, for the sweeper's log and an operator.
    if ok and type(entry) == 'table' and tonumber(entry.recorded_at) and tonumber(entry.recorded_at) <= cutoff then
      entry.recorded_at = now
      local updated = cjson.encode(entry)
      redis.call('HSET', KEYS[1], ARGV[i], updated)
      taken[#taken + 1] = ARGV[i]
      taken[#taken + 1] = updated
    end
  end
end
return taken
