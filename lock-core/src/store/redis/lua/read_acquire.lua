-- Acquire the read side of a lease: join its readers unless a writer holds
-- it or waits for it, atomically.
-- KEYS: lease, waiters marker, readers, writer-waits claims (see
--       acquire.lua).
-- ARGV: token, ttl ms, "1" when the caller waits, marker margin ms (and a
--       fifth, acquire.lua's fencing flag, sent by the same call site and
--       ignored here).
-- Returns {1, 0} when acquired, {0, remaining ms} when held.
--
-- While readers hold a name, its lease key holds READERS with the expiry of
-- the last reader's lease, so a writer's plain SET NX fails and reads the
-- readers' time left as any holder's. Each reader's own lease is its score
-- in the readers set: the server's clock in ms when it ends. A writer that
-- waits for readers sets the writer-waits marker (acquire.lua): new readers
-- wait behind it.

-- Replicate what this script does, not the script: it reads TIME and then
-- writes, which Redis 5 and 6 allow only in this mode (7 knows no other).
if redis.replicate_commands then
  redis.replicate_commands()
end

local READERS = '#readers'

local value = redis.call('GET', KEYS[1])
local remaining = nil
if value and value ~= READERS then
  -- A writer holds the name.
  remaining = redis.call('PTTL', KEYS[1])
  if remaining < 0 then
    remaining = tonumber(ARGV[2])
  end
end
local now = nil
local function clock()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- A writer waits for it: its claim has not ended. (Mostly there is none,
-- and one EXISTS says so.)
if not remaining and redis.call('EXISTS', KEYS[4]) == 1 then
  now = clock()
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  local claim = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]
  if claim then
    remaining = math.max(tonumber(claim) - now, 1)
  end
end
if remaining then
  if ARGV[3] == '1' then
    local want = remaining + tonumber(ARGV[4])
    if redis.call('PTTL', KEYS[2]) < want then
      redis.call('SET', KEYS[2], '1', 'PX', want)
    end
  end
  return {0, remaining}
end

now = now or clock()
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
-- The lease key and the readers set end with the last reader's lease: this
-- one's, unless another ends later. (Readers whose lease ended are taken
-- out by the next release.)
if not value then
  redis.call('SET', KEYS[1], READERS, 'PX', ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
elseif redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return {1, 0}
