-- Acquire: set the lease if absent, with its TTL, atomically.
-- KEYS: lease, waiters marker, fencing counter, writer-waits claims (a
--       sorted set of waiting writers' tokens, scored with when each claim
--       ends, in ms on the server's clock), elected (an election's holder),
--       fenced (the holder the counter's last token went to).
-- ARGV: token, ttl ms, "1" when the caller waits, marker margin ms,
--       "1" when the caller wants a fencing token, "1" when it is an
--       election's candidate (announced to observers).
-- PUBLISH and CHANNEL come from the store's prologue, as in release.lua.
-- Returns {1, fence} when acquired (fence 0 when not asked for),
--         {0, remaining ms} when held,
--         {2, remaining ms} when held and the caller, a waiting writer,
--         has a claim standing (this attempt's or an earlier one's): it
--         takes it back if it stops waiting (withdraw.lua).

-- Replicate what this script does, not the script: it reads TIME and then
-- writes, which Redis 5 and 6 allow only in this mode (7 knows no other).
if redis.replicate_commands then
  redis.replicate_commands()
end

-- The highest counter whose next token is still exact in a Lua number.
local LAST_EXACT = 9007199254740990

-- The next fencing token of the counter `key`, stored back in it: one more
-- than the last, and never below the server's clock in microseconds. The
-- clock is what keeps tokens increasing when the counter is lost (a restart
-- without persistence, a promoted replica that missed the last writes):
-- counting again from 1 would fall below tokens already handed out, while
-- the clock has moved on past them, unless it was set back by more than
-- the outage lasted. About 1.8e15: exact in a Lua number (a double, exact
-- up to 2^53, which the clock passes in the year 2255).
local function next_fence(key)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local fence = math.max(tonumber(redis.call('GET', key) or '0') + 1, now)
  -- Written out in digits: tostring() would give 1.7965714985971e+15,
  -- which drops the last digits and which INCR (in an earlier release of
  -- this script) refuses as not an integer.
  redis.call('SET', key, string.format('%.0f', fence))
  return fence
end

-- A counter that is not a whole count below 2^53 cannot give a token
-- above the last: fail before taking the lease, saying what to do.
if ARGV[5] == '1' then
  local stored = redis.call('GET', KEYS[3])
  local count = tonumber(stored or '0')
  if count == nil or count > LAST_EXACT then
    return redis.error_reply('the fencing counter ' .. KEYS[3] .. ' holds ' .. tostring(stored)
      .. ', not a count below 2^53: delete it (the next token then comes from the'
      .. ' server clock) or set it to a smaller whole number')
  end
end

-- How long a waiting writer's claim on the readers' turn lasts unless it
-- renews it: it does on every attempt, which comes at least twice as often
-- while readers hold the name (see below).
local WRITER_WAITS_MS = 2000

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- Ours: readers no longer wait for this writer (other writers' claims
  -- stand).
  redis.call('ZREM', KEYS[4], ARGV[1])
  if ARGV[5] == '1' then
    local fence = next_fence(KEYS[3])
    -- Whose token the counter's is, for the holder read (holder.lua): a
    -- plain acquire after it leaves it naming an earlier holder.
    redis.call('SET', KEYS[6], ARGV[1])
    if ARGV[6] == '1' then
      -- An election's new leader: `{...}:elected` (KEYS[5]) names the holder whose
      -- term the counter is (holder.lua), and says the name's releases
      -- are announced (release.lua). It is announced, `+` before its key,
      -- to whoever observes the name; waiters take no notice. PUBLISH and
      -- CHANNEL come from the store's prologue.
      redis.call('SET', KEYS[5], ARGV[1])
      redis.call(PUBLISH, KEYS[1] .. CHANNEL, '+' .. KEYS[1])
    end
    return {1, fence}
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
  -- A writer waits for readers: new readers wait behind it (see
  -- read_acquire.lua), so a stream of overlapping readers cannot starve it.
  -- A writer that stops waiting takes its claim back (withdraw.lua); the
  -- claim lasts WRITER_WAITS_MS, so a writer that died holds readers off
  -- no longer than that. The writer renews it by trying again within half
  -- that time.
  if redis.call('GET', KEYS[1]) == '#readers' then
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    redis.call('ZADD', KEYS[4], now + WRITER_WAITS_MS, ARGV[1])
    redis.call('PEXPIRE', KEYS[4], WRITER_WAITS_MS)
    remaining = math.min(remaining, WRITER_WAITS_MS / 2)
  end
  if redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    return {2, remaining}
  end
end
return {0, remaining}
