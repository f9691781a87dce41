-- Force-release: delete the lease whoever holds it, every reader of its
-- read side included; when somebody waits for it, publish its key on the
-- lease's own channel.
-- KEYS: lease, waiters marker, readers, writer-waits marker, elected.
-- PUBLISH and CHANNEL come from the store's prologue, as in release.lua.
-- Returns 1 when there was a lease, 0 otherwise.
redis.call('DEL', KEYS[3], KEYS[4])
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('EXISTS', KEYS[2], KEYS[5]) > 0 then
  redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
end
return 1
