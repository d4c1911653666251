-- The read fence of a session record that carries an `unconfirmed` token (a write not yet
-- confirmed held by the replicas or append-only files the session-store waits for).
-- KEYS[1] session hash. ARGV[1] a new token; ARGV[2..] the fields to read, `unconfirmed` last.
-- Returns those fields' values (nil for a missing one), read in this step. When the token is
-- still there it is replaced by ARGV[1]: a write, so that the WAIT / WAITAOF sent right behind
-- this script on its connection counts every earlier write of the master's replication stream,
-- the unconfirmed one included. The token stays until that wait is met (`session_confirmed`).
local values = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
if values[#values] then
  redis.call('HSET', KEYS[1], 'unconfirmed', ARGV[1])
end
return values
