-- Holder: who holds the lease, and for how much longer, read together.
-- KEYS: lease, readers, elected, fencing counter, fenced (the holder the
--       counter's last token went to, see acquire.lua).
-- Returns nil when free; {0, token, remaining ms} for a writer (remaining
-- is -1 for a value without expiry), {2, token, remaining ms, fence} for
-- a fenced writer (the one `{...}:fenced` names, or an election's leader,
-- `{...}:elected`, for leaders elected before `:fenced` was kept: the
-- name's last fencing token is its own); {1, token, remaining ms, token,
-- remaining ms, ...} for the live readers of the read side, the one whose
-- lease ends first first.
local token = redis.call('GET', KEYS[1])
if not token then
  return false
end
if token ~= '#readers' then
  if redis.call('GET', KEYS[5]) == token or redis.call('GET', KEYS[3]) == token then
    local fence = redis.call('GET', KEYS[4])
    if fence then
      return {2, token, redis.call('PTTL', KEYS[1]), fence}
    end
  end
  return {0, token, redis.call('PTTL', KEYS[1])}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local readers = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
if #readers == 0 then
  return false
end
local out = {1}
for i = 1, #readers, 2 do
  out[#out + 1] = readers[i]
  out[#out + 1] = math.floor(tonumber(readers[i + 1]) - now)
end
return out
