-- Withdraw: a writer that stopped waiting without the lease takes back
-- its claim on the readers' turn (acquire.lua), so new readers no longer
-- wait behind it. When that leaves no live claim and no writer holds the
-- name, the readers it held off are told, on the lease's channel, as a
-- release tells them (release.lua): they may get in now.
-- KEYS: lease, waiters marker, writer-waits claims.
-- ARGV: token.
-- PUBLISH and CHANNEL come from the store's prologue, as in release.lua.
-- Returns 1 when the writer's claim was there, 0 otherwise.

-- Replicate what this script does, not the script: it reads TIME and then
-- may write, which Redis 5 and 6 allow only in this mode (7 knows no
-- other).
if redis.replicate_commands then
  redis.replicate_commands()
end
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0 then
  -- Another writer still waits: the readers stay behind it.
  return 1
end
local value = redis.call('GET', KEYS[1])
if (not value or value == '#readers') and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
end
return 1
