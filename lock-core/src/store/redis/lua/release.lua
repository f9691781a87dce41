-- Release: compare-and-delete on the owner token; when somebody waits for
-- the lease, publish its key on the lease's own channel, which only the
-- processes waiting for it are subscribed to.
-- KEYS: lease, waiters marker.
-- ARGV: token.
-- PUBLISH and CHANNEL come from the store's prologue (see scripts.rs):
-- the command ('PUBLISH', or 'SPUBLISH' on a cluster with sharded pub/sub:
-- the channel is in the lease's slot) and the channel's ':<suffix>'. They
-- are part of the script rather than arguments: each argument costs the
-- server about as much as a short command on every call.
-- Returns 1 when the lease was ours and is gone, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
end
return 1
