-- List a reconciliation record in its bucket by its status, in one atomic step: in the open
-- set while it is open, else in the delivered set, never in both. Both sets carry the
-- bucket's hash tag, so this script touches one slot.
-- KEYS: 1 the bucket's open set, 2 its delivered set
-- ARGV: 1 member (`<session key>\n<run_id>`), 2 score (opening time), 3 'open' or 'delivered'
if ARGV[3] == 'open' then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 1
