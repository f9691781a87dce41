-- Release: compare-and-delete on the owner token; when somebody waits for
-- the lease, publish its key on the lease's own channel, which only the
-- processes waiting for it are subscribed to.
-- KEYS: lease, waiters marker.
-- ARGV: token, channel suffix, publish command ('PUBLISH', or 'SPUBLISH' on
-- a cluster with sharded pub/sub: the channel is in the lease's slot).
-- Returns 1 when the lease was ours and is gone, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(ARGV[3], KEYS[1] .. ':' .. ARGV[2], KEYS[1])
end
return 1
