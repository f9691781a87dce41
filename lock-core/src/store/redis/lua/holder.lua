-- Holder: the lease's token and remaining ms, read together.
-- KEYS: lease.
-- Returns nil when free, {token, remaining ms} when held (remaining is -1
-- for a value without expiry).
local token = redis.call('GET', KEYS[1])
if not token then
  return false
end
return {token, redis.call('PTTL', KEYS[1])}
