-- Clear a session record's `unconfirmed` token once the write that set it is confirmed held.
-- KEYS[1] session hash; ARGV[1] that token. A later write's token (another commit, another
-- read's fence) is left alone: that write is not confirmed by this one's wait. Returns 1 when
-- cleared, else 0.
if redis.call('HGET', KEYS[1], 'unconfirmed') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'unconfirmed')
  return 1
end
return 0
