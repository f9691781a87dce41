-- Acquire: set the lease if absent, with its TTL, atomically.
-- KEYS: lease, waiters marker, fencing counter.
-- ARGV: token, ttl ms, "1" when the caller waits, marker margin ms,
--       "1" when the caller wants a fencing token.
-- Returns {1, fence} when acquired (fence 0 when not asked for),
--         {0, remaining ms} when held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[5] == '1' then
    return {1, redis.call('INCR', KEYS[3])}
  end
  return {1, 0}
end
local remaining = redis.call('PTTL', KEYS[1])
if remaining < 0 then
  -- A value without expiry was written by something else: report our own
  -- ttl so waiters nap instead of spinning.
  remaining = tonumber(ARGV[2])
end
if ARGV[3] == '1' then
  local want = remaining + tonumber(ARGV[4])
  if redis.call('PTTL', KEYS[2]) < want then
    redis.call('SET', KEYS[2], '1', 'PX', want)
  end
end
return {0, remaining}
