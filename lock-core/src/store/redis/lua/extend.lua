-- Extend: compare-and-expire on the owner token; a reader's token moves
-- its own end in the readers set, and the lease key ends with the last
-- reader's.
-- KEYS: lease, readers. ARGV: token, ttl ms.
-- Returns 1 when extended, 0 otherwise.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if value ~= '#readers' then
  return 0
end
if redis.replicate_commands then
  redis.replicate_commands()
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if not ends or ends <= now then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local left = math.max(tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]) - now, 1)
redis.call('PEXPIRE', KEYS[1], left)
redis.call('PEXPIRE', KEYS[2], left)
return 1
