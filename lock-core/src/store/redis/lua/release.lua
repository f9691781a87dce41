-- Release: compare-and-delete on the owner token; when somebody waits for
-- the lease, publish its key on the lease's own channel, which only the
-- processes waiting for it are subscribed to. A reader's token leaves the
-- readers set instead, and the last reader to go frees the name.
-- KEYS: lease, waiters marker, writer-waits claims, elected, readers (all in
--       the lease's slot).
-- ARGV: token.
-- PUBLISH and CHANNEL come from the store's prologue (see scripts.rs):
-- the command ('PUBLISH', or 'SPUBLISH' on a cluster with sharded pub/sub:
-- the channel is in the lease's slot) and the channel's ':<suffix>'. They
-- are part of the script rather than arguments: each argument costs the
-- server about as much as a short command on every call.
-- Returns 1 when the lease was ours and is gone, 0 otherwise.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- A writer that waited for readers and then got the name with a plain
  -- SET NX left its claim (acquire.lua): readers need not wait for it any
  -- more. Other writers' claims stand.
  redis.call('ZREM', KEYS[3], ARGV[1])
  -- Announced when someone waits, and always for an election's name
  -- (see acquire.lua): its observers wait for no lease of their own. One
  -- EXISTS for both keys.
  if redis.call('EXISTS', KEYS[2], KEYS[4]) > 0 then
    redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
  end
  return 1
end
if value ~= '#readers' then
  return 0
end
if redis.replicate_commands then
  redis.replicate_commands()
end
local READERS_KEY = KEYS[5]
local ends = tonumber(redis.call('ZSCORE', READERS_KEY, ARGV[1]))
if not ends then
  return 0
end
redis.call('ZREM', READERS_KEY, ARGV[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- The readers left, those whose lease ended taken out (the set is gone
-- with its last member: then nobody is left).
local last = nil
if redis.call('EXISTS', READERS_KEY) == 1 then
  redis.call('ZREMRANGEBYSCORE', READERS_KEY, '-inf', now)
  last = redis.call('ZRANGE', READERS_KEY, -1, -1, 'WITHSCORES')[2]
end
if last then
  local left = math.max(tonumber(last) - now, 1)
  redis.call('PEXPIRE', KEYS[1], left)
  redis.call('PEXPIRE', READERS_KEY, left)
else
  -- The last reader: the name is free.
  redis.call('DEL', KEYS[1], READERS_KEY)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call(PUBLISH, KEYS[1] .. CHANNEL, KEYS[1])
  end
end
if ends > now then
  return 1
end
return 0
