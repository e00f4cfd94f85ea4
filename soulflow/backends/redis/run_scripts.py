"""The run journal's Lua scripts (runs.py): one step each in Redis, so an append, its fencing
check and the open-run indexes never come apart."""

# KEYS: run list, runs:open, runs:meta, runs:inbound, runs:fence, runs:chat:<chat>
# ARGV: run id, token, meta json, inbound key, finished (0/1), start ms, ttl s, the list's
#       length the events were folded onto, indexed (0/1: an earlier write opened the run's
#       index entries), then the events' json lines. -1: fenced; -2: someone appended since.
#       Sent again after a try whose answer was lost (it had landed: the list ends with these
#       very lines), it returns the length and changes nothing.
APPEND_EVENTS = """
local token = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '0')
if token < held then return -1 end
local length, expected = redis.call('LLEN', KEYS[1]), tonumber(ARGV[8])
if length ~= expected then
  if length == expected + #ARGV - 9 and redis.call('LINDEX', KEYS[1], -1) == ARGV[#ARGV] then
    return length
  end
  return -2
end
local n = redis.call('RPUSH', KEYS[1], unpack(ARGV, 10))
if ARGV[5] == '1' then
  if ARGV[9] == '1' then
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HDEL', KEYS[3], ARGV[1])
    redis.call('SREM', KEYS[6], ARGV[1])
    if ARGV[4] ~= '' and redis.call('HGET', KEYS[4], ARGV[4]) == ARGV[1] then
      redis.call('HDEL', KEYS[4], ARGV[4])
    end
  end
  if held > 0 then redis.call('HDEL', KEYS[5], ARGV[1]) end
  redis.call('EXPIRE', KEYS[1], ARGV[7])
else
  if token > held then redis.call('HSET', KEYS[5], ARGV[1], token) end
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  if ARGV[9] ~= '1' then
    redis.call('ZADD', KEYS[2], 'NX', ARGV[6], ARGV[1])
    redis.call('SADD', KEYS[6], ARGV[1])
    if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], ARGV[4], ARGV[1]) end
  end
end
return n
"""

# KEYS: runs:open, runs:fence; ARGV: run id, token. 1: ours (or finished), 0: a newer holder's
CLAIM_RUN = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
local token = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if token < held then return 0 end
if token > held then redis.call('HSET', KEYS[2], ARGV[1], token) end
return 1
"""

# KEYS: runs:inbound, runs:meta; ARGV: inbound key → {run id, its meta json or false}, or nil
RUN_OF_INBOUND = """
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return nil end
return {id, redis.call('HGET', KEYS[2], id)}
"""

# KEYS: runs:chat:<chat>, runs:open, runs:meta → {run id, start score, meta json} per run
RUNS_OF_CHAT = """
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local meta = redis.call('HGET', KEYS[3], id)
  if meta then
    table.insert(found, {id, redis.call('ZSCORE', KEYS[2], id) or '0', meta})
  end
end
return found
"""
