"""The ledger's Redis scripts: each read-then-write step is one Lua script, atomic across the
fleet's machines (Redis runs one script at a time). Keys are made inside the scripts from one
prefix: one Redis (or Valkey) server, or a primary with replicas; not a Redis Cluster."""

# Keys, under PREFIX:
#   jobs          set: the jobs alive or not yet reaped
#   job:ID        hash: ref, commit, order, kind (of order), started (ms), superseded_by
#   job:ID:runs   set: the runs the job started and holds
#   job:ID:starts hash: the job's starts asked and not yet answered (Idempotency-Key -> JSON)
#   lease:ID      a string with an expiry: the job lives while it exists
#   ref:REF       sorted set: the jobs of a ref by their order
#   queue         sorted set: tickets (JOB|SEQ) waiting for device slots, by turn
#   inflight      hash: runs in flight by job (the governor's count)
#   limit         a string with an expiry: the runs in flight the service's answers taught

from typing import Final

__all__ = [
    "ACQUIRE",
    "BEAT",
    "FREE",
    "INTEND",
    "LEARN",
    "LET_GO",
    "REAP",
    "REGISTER",
    "RELEASE",
]

# KEYS: none. ARGV: prefix, job, ref, commit, order ("" = the server's clock), kind, lease ms,
# supersede ("1"/"0"), priority class. Returns {state, superseded_by, order, older job ids
# marked...}: state "ok", or "superseded" when a job of the ref at a newer commit is there
# already (then nothing of this job is recorded).
REGISTER: Final = """
local p, job, ref, commit = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local order, kind, lease, supersede = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if order == '' then order = tostring(now); kind = 'start' end
local mine = tonumber(order)
local marked = {}
if ref ~= '' and commit ~= '' then
  local function newer_than(other)
    local o = redis.call('HMGET', p .. 'job:' .. other, 'order', 'kind', 'started', 'commit')
    if o[4] == false or o[4] == commit then return nil end
    if o[2] == kind then return tonumber(o[1]) > mine, o[4] end
    return tonumber(o[3]) > now, o[4]
  end
  for _, other in ipairs(redis.call('ZRANGE', p .. 'ref:' .. ref, 0, -1)) do
    if redis.call('SISMEMBER', p .. 'jobs', other) == 1 then
      local newer, its_commit = newer_than(other)
      if newer and supersede then
        return {'superseded', its_commit, order}
      end
    end
  end
  if supersede then
    for _, other in ipairs(redis.call('ZRANGE', p .. 'ref:' .. ref, 0, -1)) do
      local key = p .. 'job:' .. other
      if redis.call('SISMEMBER', p .. 'jobs', other) == 1
          and redis.call('HEXISTS', key, 'superseded_by') == 0 then
        local newer, its_commit = newer_than(other)
        if newer == false then
          redis.call('HSET', key, 'superseded_by', commit)
          table.insert(marked, other)
        end
      end
    end
  end
  redis.call('ZADD', p .. 'ref:' .. ref, mine, job)
end
redis.call('SADD', p .. 'jobs', job)
redis.call('HSET', p .. 'job:' .. job, 'ref', ref, 'commit', commit, 'order', order,
  'kind', kind, 'started', now, 'priority', ARGV[9] or 'pr')
redis.call('SET', p .. 'lease:' .. job, '1', 'PX', lease)
local answer = {'ok', '', order}
for _, other in ipairs(marked) do table.insert(answer, other) end
return answer
"""

# ARGV: prefix, job, lease ms, n, n runs to hold, answered start keys. One step: lease
# renewed, runs recorded, answered starts forgotten. Returns {state, superseded_by}: "ok";
# "superseded" (runs recorded: the job stops them); "gone" (reaped or released).
BEAT: Final = """
local p, job, lease, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('SISMEMBER', p .. 'jobs', job) == 0 then return {'gone', ''} end
if redis.call('EXISTS', p .. 'lease:' .. job) == 0 then return {'gone', ''} end
for i = 5, 4 + n do redis.call('SADD', p .. 'job:' .. job .. ':runs', ARGV[i]) end
for i = 5 + n, #ARGV do redis.call('HDEL', p .. 'job:' .. job .. ':starts', ARGV[i]) end
redis.call('SET', p .. 'lease:' .. job, '1', 'PX', lease)
local by = redis.call('HGET', p .. 'job:' .. job, 'superseded_by')
if by then return {'superseded', by} end
return {'ok', ''}
"""

# ARGV: prefix, job, Idempotency-Key, start JSON, most. A start about to be sent (a reaper
# asks again with its key). Returns {1} recorded, {0} job gone, {-1} `most` unanswered.
INTEND: Final = """
local p, job = ARGV[1], ARGV[2]
if redis.call('EXISTS', p .. 'lease:' .. job) == 0 then return {0} end
local starts = p .. 'job:' .. job .. ':starts'
if redis.call('HLEN', starts) >= tonumber(ARGV[5]) then return {-1} end
redis.call('HSET', starts, ARGV[3], ARGV[4])
return {1}
"""

# ARGV: prefix, job. The job ends: nothing of it is held any more.
RELEASE: Final = """
local p, job = ARGV[1], ARGV[2]
local ref = redis.call('HGET', p .. 'job:' .. job, 'ref')
if ref and ref ~= '' then redis.call('ZREM', p .. 'ref:' .. ref, job) end
redis.call('SREM', p .. 'jobs', job)
redis.call('DEL', p .. 'job:' .. job, p .. 'job:' .. job .. ':runs', p .. 'lease:' .. job,
  p .. 'job:' .. job .. ':starts')
redis.call('HDEL', p .. 'inflight', job)
for _, ticket in ipairs(redis.call('ZRANGE', p .. 'queue', 0, -1)) do
  if string.sub(ticket, 1, #job + 1) == job .. '|' then redis.call('ZREM', p .. 'queue', ticket) end
end
return 1
"""

# ARGV: prefix, job, ticket, runs wanted, the fleet's limit ("": the limit learned, if any),
# the class's head start (ms), strict ("1": the runs must fit; "0": one free slot admits, as
# for a project's start).
# The queue's order is the time a ticket came less its class's head start, so a higher class
# goes first and a lower one that has waited longer than the difference goes before a newer
# higher one: nobody starves. Returns {granted (1/0), place in line (0: next; -2: the job is
# not alive in the ledger), in flight, the limit (-1: none)}.
ACQUIRE: Final = """
local p, job, ticket = ARGV[1], ARGV[2], ARGV[3]
local want, head_start, strict = tonumber(ARGV[4]), tonumber(ARGV[6]), ARGV[7] == '1'
local most = tonumber(ARGV[5]) or tonumber(redis.call('GET', p .. 'limit')) or math.huge
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local q = p .. 'queue'
local function alive(j) return redis.call('EXISTS', p .. 'lease:' .. j) == 1 end
local shown = most
if most == math.huge then shown = -1 end
if not alive(job) then
  redis.call('ZREM', q, ticket)
  return {0, -2, 0, shown}
end
if redis.call('ZSCORE', q, ticket) == false then redis.call('ZADD', q, now - head_start, ticket) end
for _, other in ipairs(redis.call('ZRANGE', q, 0, -1)) do
  local j = string.match(other, '^(.*)|[^|]*$')
  if not j or not alive(j) then redis.call('ZREM', q, other) end
end
local used = 0
local held = redis.call('HGETALL', p .. 'inflight')
for i = 1, #held, 2 do
  if alive(held[i]) then used = used + tonumber(held[i + 1])
  else redis.call('HDEL', p .. 'inflight', held[i]) end
end
local place = redis.call('ZRANK', q, ticket)
if place == false then return {0, -1, used, shown} end
local fits = used + want <= most or used == 0 or (not strict and used < most)
if place == 0 and fits then
  redis.call('ZREM', q, ticket)
  redis.call('HINCRBY', p .. 'inflight', job, want)
  return {1, 0, used + want, shown}
end
return {0, place, used, shown}
"""

# ARGV: prefix, ms, less. Past the plan (overage, 402): the limit is the runs in flight now,
# less `less` (a start that began none), at least 1, for `ms`. Returns {the limit}.
LEARN: Final = """
local p, ms = ARGV[1], tonumber(ARGV[2])
local used = -tonumber(ARGV[3])
local held = redis.call('HGETALL', p .. 'inflight')
for i = 1, #held, 2 do
  if redis.call('EXISTS', p .. 'lease:' .. held[i]) == 1 then
    used = used + tonumber(held[i + 1])
  end
end
if used < 1 then used = 1 end
redis.call('SET', p .. 'limit', used, 'PX', ms)
return {used}
"""

# ARGV: prefix, job, runs (a negative count charges more). Runs of the job that ended.
FREE: Final = """
local p, job, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local left = redis.call('HINCRBY', p .. 'inflight', job, -n)
if left <= 0 then redis.call('HDEL', p .. 'inflight', job) end
return left
"""

# ARGV: prefix, most jobs, most starts a job. Claims each job whose lease expired (once:
# it leaves the ledger here). Returns {job, ref, commit, n, runs..., m, key, start...}...
REAP: Final = """
local p, most, most_starts = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local answer = {}
local claimed = 0
for _, job in ipairs(redis.call('SMEMBERS', p .. 'jobs')) do
  if claimed >= most then break end
  if redis.call('EXISTS', p .. 'lease:' .. job) == 0 then
    local info = redis.call('HMGET', p .. 'job:' .. job, 'ref', 'commit')
    local runs = redis.call('SMEMBERS', p .. 'job:' .. job .. ':runs')
    local starts = redis.call('HGETALL', p .. 'job:' .. job .. ':starts')
    local ref = info[1] or ''
    if ref ~= '' then redis.call('ZREM', p .. 'ref:' .. ref, job) end
    redis.call('SREM', p .. 'jobs', job)
    redis.call('DEL', p .. 'job:' .. job, p .. 'job:' .. job .. ':runs',
      p .. 'job:' .. job .. ':starts')
    redis.call('HDEL', p .. 'inflight', job)
    table.insert(answer, job)
    table.insert(answer, ref)
    table.insert(answer, info[2] or '')
    local kept = math.min(#runs, 10000)
    table.insert(answer, kept)
    for i = 1, kept do table.insert(answer, runs[i]) end
    local asked = math.min(#starts / 2, most_starts)
    table.insert(answer, asked)
    for i = 1, 2 * asked do table.insert(answer, starts[i]) end
    claimed = claimed + 1
  end
end
return answer
"""

# ARGV: prefix, key, holder. Deletes the key (a lease) only while `holder` holds it.
LET_GO: Final = """
local key = ARGV[1] .. ARGV[2]
if redis.call('GET', key) == ARGV[3] then return {redis.call('DEL', key)} end
return {0}
"""
