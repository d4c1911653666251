-- Record the runner's answer to a remote move, once: only a move still 'remote_started'
-- takes a result, so a late answer never overwrites a result or a decision already made.
-- KEYS: 1 archive progress hash
-- ARGV: 1 progress fields (JSON object, with the new state), 2 retention in milliseconds
-- Returns 1 when recorded, 0 when the progress had moved on.
if redis.call('HGET', KEYS[1], 'state') ~= 'remote_started' then
  return 0
end
hset_json(KEYS[1], ARGV[1])
retain(tonumber(ARGV[2]), {KEYS[1]})
return 1
