-- Force-release: delete the lease whoever holds it; publish the lease key
-- when somebody waits for it.
-- KEYS: lease, waiters marker. ARGV: channel.
-- Returns 1 when there was a lease, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[1], KEYS[1])
end
return 1
