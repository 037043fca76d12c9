package redisstore

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// The store's Lua scripts. Each runs atomically on the server: no other
// command runs between its read and its write, so each protocol step (a
// claim, a renewal, a fenced done mark, a resolution, a prune) is one
// atomic step. Redis does not roll back a script that fails half-way:
// each one checks the types of its keys (types, below) and reads what it
// decides on before its first write, so that an error leaves nothing
// written. Times come from the server's TIME inside the script, in
// microseconds since the Unix epoch; the client's clock is never used for
// a lease or a deadline. Durations arrive as microseconds.
//
// Periods are compared as byte strings (lt below, as Go compares strings),
// never with Lua's < on strings, which follows the server's locale.

// luaLib is the helpers every script starts with.
const luaLib = `
local function now()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- num: a stored time or count; 0 when absent or empty.
local function num(v)
	if not v or v == '' then return 0 end
	return tonumber(v)
end
-- str: a number as the integer text Redis stores (never 1.7e+15).
local function str(n) return string.format('%.0f', n) end
-- lt: a < b in byte order.
local function lt(a, b)
	local n = math.min(#a, #b)
	for i = 1, n do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then return x < y end
	end
	return #a < #b
end
-- utc: microseconds since the epoch as 2006-01-02T15:04:05.000000Z.
local function utc(us)
	local s = math.floor(us / 1000000)
	local frac = us - s * 1000000
	if frac < 0 then s = s - 1; frac = frac + 1000000 end
	local days = math.floor(s / 86400)
	local rem = s - days * 86400
	local z = days + 719468
	local era = math.floor(z / 146097)
	local doe = z - era * 146097
	local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
	local y = yoe + era * 400
	local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
	local mp = math.floor((5 * doy + 2) / 153)
	local d = doy - math.floor((153 * mp + 2) / 5) + 1
	local m = mp + 3
	if mp >= 10 then m = mp - 9 end
	if m <= 2 then y = y + 1 end
	return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', y, m, d,
		math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, frac)
end
-- types: refuses, before anything is written, a key of the wrong type:
-- Redis does not roll a script back, so a script that failed half-way
-- (WRONGTYPE on its third command) would leave its first writes behind.
-- Each argument is {key, type}; a missing key passes. It also refuses a
-- record whose attempt counter is not an integer (HINCRBY would fail).
-- wake moves the store's wake counter (field wake_counter of its meta
-- hash) and marks job woken at the counter's new value (its score in the
-- sorted set wakes).
local function wake(meta, wakes, job)
	local m = redis.call('HINCRBY', meta, 'wake_counter', 1)
	redis.call('ZADD', wakes, m, job)
end

local function types(...)
	for _, kt in ipairs({...}) do
		local t = redis.call('TYPE', kt[1])['ok']
		if t ~= 'none' and t ~= kt[2] then
			return redis.error_reply('WRONGTYPE key ' .. kt[1] .. ' holds a ' .. t .. ', not a ' .. kt[2] ..
				' (nothing written; delete or rename the key)')
		end
		if kt[2] == 'hash' and kt[3] then
			local a = redis.call('HGET', kt[1], 'attempt')
			if a and not tonumber(a) then
				return redis.error_reply('ERR key ' .. kt[1] .. ' has attempt ' .. a .. ', not a number (nothing written)')
			end
		end
	end
	return nil
end
local recFields = {'status', 'attempt', 'failures', 'owner', 'lease_until', 'not_before', 'last_error', 'updated',
	'fingerprint', 'value', 'revision'}
-- rec: the record at key as a flat list (status first; status false when none).
local function rec(key)
	return redis.call('HMGET', key, unpack(recFields))
end
-- covered: the job's horizon covers period.
local function covered(jobKey, period)
	local h = redis.call('HGET', jobKey, 'horizon')
	return h and h ~= '' and not lt(h, period)
end
-- index: the record of job's period is listed (for Prune and List).
local function index(periodsKey, jobsKey, job, period)
	redis.call('ZADD', periodsKey, 0, period)
	redis.call('ZADD', jobsKey, 0, job)
end
-- rerunNote: the LastError of a period re-run on request (idemstore.RerunNote).
local function rerunNote(revision, by, id, reason)
	if by == '' then by = '?' end
	return 're-run requested as revision ' .. revision .. ' by ' .. by .. ' (request ' .. id .. '): ' .. reason
end
-- promote: if the record at key is done and a re-run request waits for its
-- attempt (rerun_pending: the revision), the period gets that revision,
-- runnable at once, and the waiting requests (in the hash reruns) are
-- queued. The oldest one's reason is the note. Returns true if it did.
local function promote(key, reruns, t)
	local r = redis.call('HMGET', key, 'status', 'rerun_pending', 'attempt')
	if r[1] ~= 'done' or not r[2] or r[2] == '' then return false end
	local oldest
	local all = redis.call('HGETALL', reruns)
	for i = 1, #all, 2 do
		local q = cjson.decode(all[i + 1])
		if q.state == 'pending' then
			q.state = 'queued'
			redis.call('HSET', reruns, all[i], cjson.encode(q))
			local at = tonumber(q.requested)
			if not oldest or at < oldest.at or (at == oldest.at and lt(all[i], oldest.id)) then
				oldest = {at = at, id = all[i], by = q.by, reason = q.reason}
			end
		end
	end
	local note = rerunNote(r[2], '', '?', '')
	if oldest then note = rerunNote(r[2], oldest.by, oldest.id, oldest.reason) end
	redis.call('HSET', key, 'status', 'failed', 'revision', r[2], 'failures', 0, 'last_error', note, 'updated', str(t),
		'revised_after', r[3])
	redis.call('HDEL', key, 'rerun_pending', 'not_before', 'lease_until')
	return true
end
-- advance: move job's cursor forward to period.
local function advance(jobKey, jobsKey, job, period)
	local c = redis.call('HGET', jobKey, 'cursor')
	if not c or lt(c, period) then
		redis.call('HSET', jobKey, 'cursor', period)
		redis.call('ZADD', jobsKey, 0, job)
	end
end
`

// readScript is Lookup and the read before a resolution: the server's
// time, the record and whether the job's horizon covers the period.
//
// KEYS: record, job. ARGV: period.
// Returns {now, covered (0/1), status or false, attempt, failures, owner,
// lease_until, not_before, last_error, updated, fingerprint, value}.
var readScript = redis.NewScript(luaLib + `
local r = rec(KEYS[1])
local out = {now(), covered(KEYS[2], ARGV[1]) and 1 or 0}
for i = 1, #r do out[#out + 1] = r[i] end
return out
`)

// claimScript is Claim. A key with no record (unless the job's horizon
// covers it) is taken as attempt 1; a running attempt whose lease expired
// on the server's clock, or whose holder the client found gone (ARGV[4],
// ARGV[5]: that attempt and its owner), is taken over for attempt+1, in
// doubt, counted as a failure, with the note idemstore.NoteDied (its lease
// held: its process died) or idemstore.NoteExpired (its lease expired),
// written into the script's source; a failed attempt from its NotBefore
// on, and an unknown one with ARGV[3] = 1, likewise (the attempt counter is
// the fencing token: HINCRBY, never reused). Anything else is left as it
// is, and the client tells which (idemstore.Decide). A record whose
// fingerprint differs from ARGV[8] (both not empty) is left as it is
// (idemstore.ClaimMismatch); a claim that takes a key whose record has no
// fingerprint stores ARGV[8].
//
// KEYS: record, job, periods, jobs. ARGV: owner, lease µs, take unknown
// (0/1), gone attempt, gone owner, job, period, fingerprint. Returns
// {taken (0/1), new attempt, doubt (0/1), now, covered (0/1), status or
// false, attempt, failures, owner, lease_until, not_before, last_error,
// updated, fingerprint, value} with the record as it was before the claim
// (an abandoned attempt's failure and note counted already). A done key is
// answered from one read, before the helpers are even defined, with three
// values: {'done', fingerprint, value} (what Claim must return for
// ClaimDone): the path of every duplicate trigger.
//
// The type checks cost commands, so each path makes only the ones its
// writes need, before its first write: the record's type and attempt are
// known from the first read (HMGET fails on a key that is not a hash); the
// job's from the read of its horizon; the two index sets' by TYPE, on the
// path of a key with no record (the one that writes them) and on a take
// of a key with a record (whose run may move the cursor when it ends), not
// on the paths that write nothing.
var claimScript = redis.NewScript(`
-- The record first: a done key, the duplicate trigger's path, is answered
-- from this one read (status, fingerprint and value are all the engine
-- needs of it; nothing is written). A key of the wrong type fails the read
-- with an error reply, not a raised error, and types() below names it.
local r = redis.pcall('HMGET', KEYS[1], 'status', 'attempt', 'failures', 'owner', 'lease_until', 'not_before',
	'last_error', 'updated', 'fingerprint', 'value', 'revision')
if r[1] == 'done' then return {'done', r[9], r[10]} end
` + luaLib + `
if r.err then return types({KEYS[1], 'hash'}) or r end
if r[2] and not tonumber(r[2]) then
	return redis.error_reply('ERR key ' .. KEYS[1] .. ' has attempt ' .. r[2] .. ', not a number (nothing written)')
end
local t = now()
local status = r[1]
local function answer(taken, attempt, doubt, cov)
	local out = {taken, attempt, doubt, t, cov}
	for i = 1, #recFields do out[#out + 1] = r[i] end
	return out
end
if not status then
	local h = redis.pcall('HGET', KEYS[2], 'horizon')
	if type(h) == 'table' and h.err then return types({KEYS[2], 'hash'}) or h end
	if h and h ~= '' and not lt(h, ARGV[7]) then return answer(0, 0, 0, 1) end
	local bad = types({KEYS[3], 'zset'}, {KEYS[4], 'zset'})
	if bad then return bad end
	local a = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
	redis.call('HSET', KEYS[1], 'status', 'running', 'failures', 0, 'owner', ARGV[1],
		'lease_until', str(t + tonumber(ARGV[2])), 'last_error', '', 'created', str(t), 'updated', str(t),
		'fingerprint', ARGV[8])
	index(KEYS[3], KEYS[4], ARGV[6], ARGV[7])
	return answer(1, a, 0, 0)
end
local fp = r[9] or ''
if ARGV[8] ~= '' and fp ~= '' and fp ~= ARGV[8] then return answer(0, 0, 0, 0) end
local take, doubt = false, 0
local attempt, lease = num(r[2]), num(r[5])
if status == 'running' then
	if lease <= t or (ARGV[5] ~= '' and r[4] == ARGV[5] and r[2] == ARGV[4]) then
		take, doubt = true, 1
		local note = ` + luaString(idemstore.NoteExpired) + `
		if lease > t then note = ` + luaString(idemstore.NoteDied) + ` end
		r[3] = str(num(r[3]) + 1)
		r[7] = string.format(note, str(attempt), r[4], utc(lease))
		redis.call('HSET', KEYS[1], 'failures', r[3], 'last_error', r[7])
	end
elseif status == 'failed' then
	take = num(r[6]) <= t
elseif status == 'unknown' then
	if ARGV[3] == '1' then take, doubt = true, 1 end
end
if not take then return answer(0, 0, 0, 0) end
-- The job's keys are not written here, but a run that moves the cursor
-- writes them when it ends: refuse them now, before fn runs, as on the
-- path of a key with no record.
local bad = types({KEYS[2], 'hash'}, {KEYS[3], 'zset'}, {KEYS[4], 'zset'})
if bad then return bad end
local a = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
if fp == '' then
	redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[1],
		'lease_until', str(t + tonumber(ARGV[2])), 'updated', str(t), 'fingerprint', ARGV[8])
else
	redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[1],
		'lease_until', str(t + tonumber(ARGV[2])), 'updated', str(t))
end
redis.call('HDEL', KEYS[1], 'not_before', 'ended_by')
return answer(1, a, doubt, 0)
`)

// luaString is s as a Lua string literal.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' || c == '\\' || c < 0x20 || c >= 0x7f {
			fmt.Fprintf(&b, "\\%03d", c)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('\'')
	return b.String()
}

// renewScript is Renew: the lease of a running attempt runs until the
// server's time plus ARGV[2] µs.
//
// KEYS: record. ARGV: attempt, lease µs. Returns 1, or 0 if the attempt no
// longer holds the key.
var renewScript = redis.NewScript(luaLib + `
local r = redis.pcall('HMGET', KEYS[1], 'status', 'attempt')
if r.err then return types({KEYS[1], 'hash'}) or r end
if r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end
local t = now()
redis.call('HSET', KEYS[1], 'lease_until', str(t + tonumber(ARGV[2])), 'updated', str(t))
return 1
`)

// finishScript is Finish: it records how a running attempt ended, fenced
// by its attempt number; a backoff (ARGV[4] µs, empty for none) runs from
// the server's time. With ARGV[6] = 1 a done mark also moves the job's
// cursor forward to the period, in the same step. A done mark stores the
// value ARGV[9] (empty: none) in the same step.
//
// The record keeps the attempt that ended it (ended_by): the same end
// sent again by that attempt (go-redis re-sends a command whose reply was
// lost: a dropped connection, a server killed after its fsync) finds it
// and returns 1 without writing, rather than 0 for an end that stands.
//
// A done mark of an attempt for which a re-run request waits (the
// record's rerun_pending, written by rerunScript) gives the period the
// request's revision in the same step (promote): the period is runnable
// at once, and the attempt's end stands (revised_after: the same done mark
// re-sent still returns 1).
//
// KEYS: record, job, jobs, the period's re-run requests. ARGV: attempt,
// status, failures, backoff µs, error, cursor (0/1), job, period, value.
// Returns 1, or 0 if the attempt no longer holds the key.
//
// It writes the record with one HSET and one HDEL, and checks the types of
// the job's keys only when it moves the cursor: the first read (HMGET
// fails on a key that is not a hash) and the fence (a running attempt's
// own number) vouch for the record.
var finishScript = redis.NewScript(luaLib + `
local r = redis.pcall('HMGET', KEYS[1], 'status', 'attempt', 'ended_by', 'revised_after', 'rerun_pending')
if r.err then return types({KEYS[1], 'hash'}) or r end
if r[2] == ARGV[1] and r[3] == ARGV[1] and (r[1] == ARGV[2] or (ARGV[2] == 'done' and r[4] == ARGV[1])) then return 1 end
if r[1] ~= 'running' or r[2] ~= ARGV[1] then return 0 end
local cursor = ARGV[6] == '1' and ARGV[2] == 'done'
if cursor then
	local bad = types({KEYS[2], 'hash'}, {KEYS[3], 'zset'})
	if bad then return bad end
end
local rerun = ARGV[2] == 'done' and r[5] and r[5] ~= ''
if rerun then
	local bad = types({KEYS[4], 'hash'})
	if bad then return bad end
end
local t = now()
local set = {'status', ARGV[2], 'failures', ARGV[3], 'last_error', ARGV[5], 'updated', str(t), 'ended_by', ARGV[1]}
local del = {'lease_until'}
if ARGV[4] ~= '' then
	set[#set + 1] = 'not_before'
	set[#set + 1] = str(t + tonumber(ARGV[4]))
else
	del[#del + 1] = 'not_before'
end
if ARGV[2] == 'done' and ARGV[9] ~= '' then
	set[#set + 1] = 'value'
	set[#set + 1] = ARGV[9]
else
	del[#del + 1] = 'value'
end
redis.call('HSET', KEYS[1], unpack(set))
redis.call('HDEL', KEYS[1], unpack(del))
if cursor then advance(KEYS[2], KEYS[3], ARGV[7], ARGV[8]) end
if rerun then promote(KEYS[1], KEYS[4], t) end
return 1
`)

// resolveScript is Resolve's write: the client read the record
// (readScript), checked it with idemstore.Resolvable and computed the new
// status and note with idemstore.Resolved; the write happens only if the
// record is still as read (ARGV[1] = 1: found, with attempt ARGV[2], status
// ARGV[3], lease_until ARGV[4] and updated ARGV[5]; 0: none, and the
// horizon still does not cover the period).
//
// KEYS: record, job, periods, jobs. ARGV: found, attempt, status,
// lease_until, updated, new status, note, job, period. Returns 1, or 0 if
// the record changed (read it again).
var resolveScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'hash'}, {KEYS[2], 'hash'}, {KEYS[3], 'zset'}, {KEYS[4], 'zset'}, {KEYS[5], 'hash'}, {KEYS[6], 'zset'})
if bad then return bad end
local r = rec(KEYS[1])
local t = now()
if ARGV[1] == '1' then
	if r[1] ~= ARGV[3] or (r[2] or '') ~= ARGV[2] or (r[5] or '') ~= ARGV[4] or (r[8] or '') ~= ARGV[5] then return 0 end
	redis.call('HSET', KEYS[1], 'status', ARGV[6], 'failures', 0, 'last_error', ARGV[7], 'updated', str(t))
	redis.call('HDEL', KEYS[1], 'not_before', 'lease_until', 'ended_by')
	wake(KEYS[5], KEYS[6], ARGV[8])
	return 1
end
if r[1] or covered(KEYS[2], ARGV[9]) then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[6], 'attempt', 0, 'failures', 0, 'owner', '', 'last_error', ARGV[7],
	'created', str(t), 'updated', str(t))
index(KEYS[3], KEYS[4], ARGV[8], ARGV[9])
wake(KEYS[5], KEYS[6], ARGV[8])
return 1
`)

// wakeScript is Wake. KEYS: meta, wakes. ARGV: job.
var wakeScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'hash'}, {KEYS[2], 'zset'})
if bad then return bad end
wake(KEYS[1], KEYS[2], ARGV[1])
return 1
`)

// advanceScript is Advance.
//
// KEYS: job, jobs. ARGV: job, period.
var advanceScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'hash'}, {KEYS[2], 'zset'})
if bad then return bad end
advance(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
return 1
`)

// startScript is Start: it sets the job's cursor unless it has one, and
// returns {cursor, horizon}.
//
// KEYS: job, jobs. ARGV: job, before.
var startScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'hash'}, {KEYS[2], 'zset'})
if bad then return bad end
local c = redis.call('HGET', KEYS[1], 'cursor')
if not c or c == '' then
	redis.call('HSET', KEYS[1], 'cursor', ARGV[2])
	redis.call('ZADD', KEYS[2], 0, ARGV[1])
end
local j = redis.call('HMGET', KEYS[1], 'cursor', 'horizon')
return {j[1] or '', j[2] or ''}
`)

// pruneScript is Prune: unless the job's cursor is before through, or a
// record at or before through is not settled, it deletes the job's records
// at or before through and raises the horizon to through.
//
// The re-run requests of the pruned periods go too.
//
// KEYS: job, periods, jobs, re-run periods. ARGV: record key prefix (the
// part before the period), job, through, re-run requests' key prefix.
// Returns {pruned (0/1), cursor, unsettled, first unsettled, deleted}.
var pruneScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'hash'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'}, {KEYS[4], 'zset'})
if bad then return bad end
local cursor = redis.call('HGET', KEYS[1], 'cursor') or ''
local periods = redis.call('ZRANGEBYLEX', KEYS[2], '-', '[' .. ARGV[3])
local unsettled, first = 0, ''
for _, p in ipairs(periods) do
	local s = redis.call('HGET', ARGV[1] .. p, 'status')
	if s and s ~= 'done' and s ~= 'skipped' then
		unsettled = unsettled + 1
		if first == '' then first = p end
	end
end
if (cursor ~= '' and lt(cursor, ARGV[3])) or unsettled > 0 then
	return {0, cursor, unsettled, first, 0}
end
local deleted = 0
for _, p in ipairs(periods) do
	deleted = deleted + redis.call('DEL', ARGV[1] .. p)
	redis.call('ZREM', KEYS[2], p)
end
for _, p in ipairs(redis.call('ZRANGEBYLEX', KEYS[4], '-', '[' .. ARGV[3])) do
	redis.call('DEL', ARGV[4] .. p)
end
redis.call('ZREMRANGEBYLEX', KEYS[4], '-', '[' .. ARGV[3])
local h = redis.call('HGET', KEYS[1], 'horizon')
if not h or lt(h, ARGV[3]) then redis.call('HSET', KEYS[1], 'horizon', ARGV[3]) end
redis.call('ZADD', KEYS[3], 0, ARGV[2])
return {1, cursor, 0, '', deleted}
`)

// listScript is List: the records of one job (ARGV[2]) or of every job,
// in job then period order (members of a sorted set with one score come
// in byte order), with status ARGV[3] (empty: any), at most ARGV[4] of
// them (0: no limit).
//
// KEYS: jobs. ARGV: store prefix ({p}), job, status, limit. Returns a flat
// list of job, period, status, attempt, failures, owner, lease_until,
// not_before, last_error, updated, fingerprint, value per record.
var listScript = redis.NewScript(luaLib + `
local jobs
if ARGV[2] ~= '' then jobs = {ARGV[2]} else jobs = redis.call('ZRANGE', KEYS[1], 0, -1) end
local limit = tonumber(ARGV[4])
local out, n = {}, 0
for _, job in ipairs(jobs) do
	local base = ARGV[1] .. ':run:' .. #job .. ':' .. job .. ':'
	for _, p in ipairs(redis.call('ZRANGE', ARGV[1] .. ':periods:' .. job, 0, -1)) do
		local r = rec(base .. p)
		if r[1] and (ARGV[3] == '' or r[1] == ARGV[3]) then
			out[#out + 1] = job
			out[#out + 1] = p
			for i = 1, #r do out[#out + 1] = r[i] or '' end
			n = n + 1
			if limit > 0 and n >= limit then return out end
		end
	end
end
return out
`)

// rerunScript is Rerun: for every key of the request, in one step, or for
// none. It first checks every key (the types of its keys; unless the
// request was recorded for one of them, each must have a record that is
// neither parked nor unknown) and returns the first refused one, writing nothing; then,
// key by key, it promotes a request that waits for a done attempt (an
// older redisstore's done mark does not), and records the request: a done
// or skipped period gets revision+1, runnable at once (status failed, no
// backoff, no failure counted; revised_after: the attempt whose done mark
// stands); a running one gets rerun_pending (the revision its done mark
// gives it, shared by the requests meanwhile); a failed one keeps its
// revision. A request recorded for the key before is seen: nothing more;
// and when it was recorded for any key of the request (sent before), every
// key is seen, none refused, nothing written (a key it did not name then:
// a dependent computed anew).
//
// KEYS: per key, its record, job, re-run requests and the job's re-run
// periods; then meta and wakes. ARGV: request id, reason, by, then the
// keys' periods, then their jobs. Every job of the request is woken. Returns
// {'refused', index (from 1), found (0/1), pruned (0/1), status,
// last_error}, or per key {state (queued, after, due, seen), revision}.
var rerunScript = redis.NewScript(luaLib + `
local n = (#KEYS - 2) / 4
local meta, wakes = KEYS[#KEYS - 1], KEYS[#KEYS]
local id, reason, by = ARGV[1], ARGV[2], ARGV[3]
local sent = false
local bad = types({meta, 'hash'}, {wakes, 'zset'})
if bad then return bad end
for i = 1, n do
	local b = (i - 1) * 4
	local bad = types({KEYS[b + 1], 'hash', true}, {KEYS[b + 2], 'hash'}, {KEYS[b + 3], 'hash'}, {KEYS[b + 4], 'zset'})
	if bad then return bad end
	if redis.call('HEXISTS', KEYS[b + 3], id) == 1 then sent = true end
end
for i = 1, n do
	local b = (i - 1) * 4
	if not sent then
		local r = redis.call('HMGET', KEYS[b + 1], 'status', 'last_error')
		local st = r[1]
		if not st or st == 'parked' or st == 'unknown' then
			local pruned = (not st) and covered(KEYS[b + 2], ARGV[3 + i])
			return {'refused', i, st and 1 or 0, pruned and 1 or 0, st or '', r[2] or ''}
		end
	end
end
local t = now()
local out = {}
for i = 1, n do
	local b = (i - 1) * 4
	local rk, qk = KEYS[b + 1], KEYS[b + 3]
	promote(rk, qk, t)
	local seen = redis.call('HGET', qk, id)
	if seen then
		out[#out + 1] = 'seen'
		out[#out + 1] = cjson.decode(seen).revision
	elseif sent then
		-- A key the request did not name when it was first sent (its
		-- dependents, computed anew): nothing more.
		out[#out + 1] = 'seen'
		out[#out + 1] = str(num(redis.call('HGET', rk, 'revision')))
	else
		local r = redis.call('HMGET', rk, 'status', 'revision', 'rerun_pending', 'attempt')
		local rev, state, q = num(r[2]), 'due', 'queued'
		if r[1] == 'done' or r[1] == 'skipped' then
			rev, state = rev + 1, 'queued'
			redis.call('HSET', rk, 'status', 'failed', 'revision', str(rev), 'failures', 0,
				'last_error', rerunNote(str(rev), by, id, reason), 'updated', str(t), 'revised_after', r[4] or '')
			-- A request that waited for an attempt that did not end done
			-- (it failed, and the period was skipped) is answered by this
			-- revision: left pending, its promotion would run it again.
			redis.call('HDEL', rk, 'not_before', 'lease_until', 'rerun_pending')
		elseif r[1] == 'running' then
			state, q = 'after', 'pending'
			if r[3] and r[3] ~= '' then
				rev = tonumber(r[3])
			else
				rev = rev + 1
				redis.call('HSET', rk, 'rerun_pending', str(rev))
			end
		end
		redis.call('HSET', qk, id, cjson.encode({revision = str(rev), state = q, reason = reason, by = by, requested = str(t)}))
		redis.call('ZADD', KEYS[b + 4], 0, ARGV[3 + i])
		out[#out + 1] = state
		out[#out + 1] = str(rev)
	end
end
-- The Schedulers look at each job of the request at once.
local woken = {}
for i = 1, n do
	local job = ARGV[3 + n + i]
	if not woken[job] then
		woken[job] = true
		wake(meta, wakes, job)
	end
end
return out
`)

// rerunsDueScript is RerunsDue: the job's periods at or before through
// that were re-run on request and have not run since (a revision above 0,
// status failed or running), in byte order.
//
// KEYS: the job's re-run periods. ARGV: record key prefix, through.
var rerunsDueScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'zset'})
if bad then return bad end
local out = {}
for _, p in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], '-', '[' .. ARGV[2])) do
	local r = redis.call('HMGET', ARGV[1] .. p, 'status', 'revision')
	if num(r[2]) > 0 and (r[1] == 'failed' or r[1] == 'running') then out[#out + 1] = p end
end
return out
`)
