-- Force-release: delete the lease whoever holds it; when somebody waits for
-- it, publish its key on the lease's own channel.
-- KEYS: lease, waiters marker.
-- PUBLISH and CHANNEL come from the store's prologue, as in release.lua.
-- Returns 1 when there was a lease, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
end
return 1
