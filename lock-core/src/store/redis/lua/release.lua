-- Release: compare-and-delete on the owner token; publish the lease key
-- when somebody waits for it.
-- KEYS: lease, waiters marker. ARGV: token, channel.
-- Returns 1 when the lease was ours and is gone, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
