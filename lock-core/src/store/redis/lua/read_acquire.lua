-- Acquire the read side of a lease: join its readers unless a writer holds
-- it or waits for it, atomically.
-- KEYS: lease, waiters marker, readers, writers' claims (see acquire.lua),
--       all in the lease's slot.
-- ARGV: token, ttl ms, "1" when the caller waits, marker margin ms.
-- Returns {1, 0} when acquired, {0, remaining ms} when held.
--
-- While readers hold a name, its lease key holds READERS with the expiry of
-- the last reader's lease, so a writer's plain SET NX fails and reads the
-- readers' time left as any holder's. Each reader's own lease is its score
-- in the readers set: the server's clock in ms when it ends. A writer that
-- waits for readers claims their turn (acquire.lua): new readers wait
-- behind it.

-- Replicate what this script does, not the script: it reads TIME and then
-- writes, which Redis 5 and 6 allow only in this mode (7 knows no other).
if redis.replicate_commands and (redis.REDIS_VERSION_NUM or 0) < 0x070000 then
  redis.replicate_commands()
end

local READERS = '#readers'
local LEASE = KEYS[1]

local value = redis.call('GET', LEASE)
local remaining = nil
if value and value ~= READERS then
  -- A writer holds the name.
  remaining = redis.call('PTTL', LEASE)
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
if not remaining then
  local claims = KEYS[4]
  if redis.call('EXISTS', claims) == 1 then
    now = clock()
    redis.call('ZREMRANGEBYSCORE', claims, '-inf', now)
    local claim = redis.call('ZRANGE', claims, -1, -1, 'WITHSCORES')[2]
    if claim then
      remaining = math.max(tonumber(claim) - now, 1)
    end
  end
end
if remaining then
  if ARGV[3] == '1' then
    local waiters = KEYS[2]
    local want = remaining + tonumber(ARGV[4])
    if redis.call('PTTL', waiters) < want then
      redis.call('SET', waiters, '1', 'PX', want)
    end
  end
  return {0, remaining}
end

now = now or clock()
local ttl = tonumber(ARGV[2])
local readers = KEYS[3]
redis.call('ZADD', readers, now + ttl, ARGV[1])
-- The lease key and the readers set end with the last reader's lease: this
-- one's, unless another ends later. (Readers whose lease ended are taken
-- out by the next release.)
if not value then
  redis.call('SET', LEASE, READERS, 'PX', ttl)
  redis.call('PEXPIRE', readers, ttl)
elseif redis.call('PTTL', LEASE) < ttl then
  redis.call('PEXPIRE', LEASE, ttl)
  redis.call('PEXPIRE', readers, ttl)
end
return {1, 0}
