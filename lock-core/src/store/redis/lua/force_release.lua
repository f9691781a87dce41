-- Force-release: delete the lease whoever holds it; when somebody waits for
-- it, publish its key on the lease's own channel.
-- KEYS: lease, waiters marker.
-- ARGV: channel suffix, publish command ('PUBLISH' or 'SPUBLISH').
-- Returns 1 when there was a lease, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(ARGV[2], KEYS[1] .. ':' .. ARGV[1], KEYS[1])
end
return 1
