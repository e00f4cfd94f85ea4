"""Lua scripts: each runs atomically in Redis, so a check and the write it guards cannot be
separated by another node's write (the whole point of a fencing token)."""

from __future__ import annotations

# KEYS: lease, fence counter. ARGV: owner, ttl ms.
# Take a free lease with a new fencing token; nil if held (by anyone).
LEASE_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"""

# KEYS: lease, fence counter. ARGV: owner, ttl ms.
# Take the lease with a new fencing token, held or not: only for a lease that belongs to one
# owner by name (a node's private partition), taken over from the owner's previous life.
LEASE_TAKE_OVER = """
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"""

# KEYS: lease. ARGV: expected value, ttl ms. Compare-and-extend.
LEASE_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease. ARGV: expected value. Compare-and-delete.
LEASE_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

# KEYS: seen, stream, pending hash. ARGV: inbound key, at, message json, seen ttl s, part.
# Journal a message unless its id was seen: dedupe, stream entry and pending record at once.
INBOUND_ACCEPT = """
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'EX', ARGV[4]) then return false end
local id = redis.call('XADD', KEYS[2], '*', 'k', ARGV[1], 'm', ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5] .. '|' .. id .. '|' .. ARGV[3])
return id
"""

# KEYS: pending hash, stream, lease (or the pending hash again when unfenced).
# ARGV: inbound key, entry id, expected lease value ('' = unfenced), group.
# 1 done, 0 not pending, -1 fenced (the lease is no longer ours).
INBOUND_COMPLETE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[3] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
redis.call('XACK', KEYS[2], ARGV[4], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""

# KEYS: messages hash, state hash, partition order, sequence, answered, the chat's partition
# lease. ARGV: message id, message json, answered ttl s, '1' if it answers an inbound message,
# the lease value it must still hold ('' = no check). -1: fenced (the chat moved). A message
# has no state until its first send: none reads as '0|0|0|' (no attempt, not in flight).
OUTBOX_PUT = """
if ARGV[5] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[5] then return -1 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[1])
if ARGV[4] == '1' then redis.call('SET', KEYS[5], '1', 'EX', ARGV[3]) end
return 1
"""

# KEYS: messages hash, state hash. ARGV: message id, new state. Only while pending.
OUTBOX_STATE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

# KEYS: messages hash, state hash, partition order. ARGV: message id.
OUTBOX_REMOVE = """
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return removed
"""

# KEYS: list. Count and delete in one step, so nothing added in between is lost uncounted.
LIST_PURGE = """
local n = redis.call('LLEN', KEYS[1])
redis.call('DEL', KEYS[1])
return n
"""

# KEYS: list, its dated name. ARGV: cap. Move a full list aside (a dead-letter queue at its cap).
LIST_ROTATE = """
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return redis.call('RENAMENX', KEYS[1], KEYS[2])
end
return 0
"""

# KEYS: cursors hash, lease (or the hash again when unfenced).
# ARGV: expected lease value ('' = unfenced), then field, value pairs.
CURSORS_UPDATE = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""

# KEYS: nodes. ARGV: node id, ttl ms. Heartbeat, forget the dead, count the living.
NODES_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""
