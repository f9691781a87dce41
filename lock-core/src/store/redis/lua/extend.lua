-- Extend: compare-and-expire on the owner token.
-- KEYS: lease. ARGV: token, ttl ms.
-- Returns 1 when extended, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
