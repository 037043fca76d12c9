package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

var _ idemstore.LimitStore = (*Store)(nil)

// The limits shared by every process (package limit), under the store's
// hash tag like its other keys:
//
//	{p}:limit:rate:<name>    string: a rate limit's theoretical arrival time
//	                         (µs since the epoch, server's clock); it expires
//	                         when that time has passed (it then says what no
//	                         key says: nothing taken)
//	{p}:limit:slots:<name>   hash: an "at once" limit's held places: field the
//	                         place's number, value "<expires µs>|<len(token)>|
//	                         <token><owner>"
func (s *Store) rateKey(name string) string  { return s.prefix + ":limit:rate:" + name }
func (s *Store) slotsKey(name string) string { return s.prefix + ":limit:slots:" + name }

// luaSlots is the helpers of the slot scripts.
const luaSlots = `
-- slot: a held place's value as expires (µs), token, owner.
local function slot(v)
	local e, n, rest = string.match(v, '^(%d+)|(%d+)|(.*)$')
	if not e then return 0, '', '' end
	n = tonumber(n)
	return tonumber(e), string.sub(rest, 1, n), string.sub(rest, n + 1)
end
local function slotval(expires, token, owner)
	return str(expires) .. '|' .. #token .. '|' .. token .. owner
end
`

// takeRateScript is TakeRate: the generic cell rate algorithm
// (idemstore.TakeRate) on the server's clock. tat moves on by ARGV[1]
// (n intervals) from max(tat, now); the wait that gives, next - now -
// ARGV[2] (burst intervals), is reserved if it is at most ARGV[3]
// (maxWait).
//
// KEYS: rate. ARGV: n intervals µs, burst intervals µs, maxWait µs.
// Returns {reserved (0/1), wait µs} (not reserved: the wait beyond
// maxWait, when to ask again).
var takeRateScript = redis.NewScript(luaLib + `
local bad = types({KEYS[1], 'string'})
if bad then return bad end
local t = now()
local tat = num(redis.call('GET', KEYS[1]))
if tat < t then tat = t end
local nxt = tat + tonumber(ARGV[1])
local wait = nxt - t - tonumber(ARGV[2])
if wait < 0 then wait = 0 end
if wait > tonumber(ARGV[3]) then return {0, wait - tonumber(ARGV[3])} end
redis.call('SET', KEYS[1], str(nxt), 'PX', str(math.ceil((nxt - t) / 1000) + 1))
return {1, wait}
`)

// acquireSlotScript is AcquireSlot: a place whose lease has not ended on
// the server's clock is live, unless the client found its holder's
// process gone (ARGV[5...]: pairs of place and the token the client saw
// there: a place held by another token since is live). With fewer live
// places than ARGV[1], it takes the lowest number that is not live. A
// live place of the caller's own token is its answer: the same call sent
// again (go-redis re-sends a command whose reply was lost) takes no
// second place.
//
// KEYS: slots. ARGV: max, owner, token, lease µs, [place, token]...
// Returns {1, place}, or {0, µs until the first live lease ends, then
// place, token, owner of each live place}.
var acquireSlotScript = redis.NewScript(luaLib + luaSlots + `
local bad = types({KEYS[1], 'hash'})
if bad then return bad end
local t = now()
local gone = {}
for i = 5, #ARGV, 2 do gone[ARGV[i]] = ARGV[i + 1] end
local all = redis.call('HGETALL', KEYS[1])
local live, n, first, out = {}, 0, -1, {}
for i = 1, #all, 2 do
	local e, token, owner = slot(all[i + 1])
	local left = e - t
	if left > 0 and gone[all[i]] ~= token then
		if token == ARGV[3] then return {1, tonumber(all[i])} end
		live[tonumber(all[i])] = true
		n = n + 1
		if first < 0 or left < first then first = left end
		out[#out + 1] = all[i]
		out[#out + 1] = token
		out[#out + 1] = owner
	end
end
if n >= tonumber(ARGV[1]) then
	local res = {0, first}
	for i = 1, #out do res[#res + 1] = out[i] end
	return res
end
local s = 0
while live[s] do s = s + 1 end
redis.call('HSET', KEYS[1], string.format('%d', s), slotval(t + tonumber(ARGV[4]), ARGV[3], ARGV[2]))
return {1, s}
`)

// renewSlotScript is RenewSlot: the place's lease runs to the server's
// time plus ARGV[3], if token ARGV[2] holds it.
//
// KEYS: slots. ARGV: place, token, lease µs. Returns 1, or 0 if the token
// does not hold the place.
var renewSlotScript = redis.NewScript(luaLib + luaSlots + `
local bad = types({KEYS[1], 'hash'})
if bad then return bad end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local _, token, owner = slot(v)
if token ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], slotval(now() + tonumber(ARGV[3]), token, owner))
return 1
`)

// releaseSlotScript is ReleaseSlot: the place is given back if token
// ARGV[2] holds it (a hash whose last place goes is deleted).
//
// KEYS: slots. ARGV: place, token. Returns 1, or 0 if the token did not
// hold the place.
var releaseSlotScript = redis.NewScript(luaLib + luaSlots + `
local bad = types({KEYS[1], 'hash'})
if bad then return bad end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local _, token = slot(v)
if token ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`)

// TakeRate implements [idemstore.LimitStore] on the server's clock, in
// one script.
func (s *Store) TakeRate(ctx context.Context, name string, r idemstore.Rate, n int, maxWait time.Duration) (wait time.Duration, reserved bool, err error) {
	iv := r.Interval()
	v, err := takeRateScript.Run(ctx, s.client, []string{s.rateKey(name)},
		micros(time.Duration(n)*iv), micros(time.Duration(r.Burst)*iv), micros(maxWait)).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("the script returned %d values, want 2", len(v))
	}
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: store %q: rate limit %q: %w", s.name, name, err)
	}
	return time.Duration(v[1]) * time.Microsecond, v[0] == 1, nil
}

// AcquireSlot implements [idemstore.LimitStore] on the server's clock.
// When every place is live, the script returns their holders; a holder
// whose process is gone ([idemstore.HolderGone]) does not hold its place,
// and the script runs again naming the places of such holders and the
// tokens it saw there (a place that has changed hands since is not taken).
func (s *Store) AcquireSlot(ctx context.Context, name string, max int, h idemstore.SlotHolder, lease time.Duration) (slot int, ok bool, wait time.Duration, err error) {
	var gone []any
	seen := map[string]bool{}
	for range 4 {
		args := append([]any{max, h.Owner, h.Token, micros(lease)}, gone...)
		var v []any
		v, err = acquireSlotScript.Run(ctx, s.client, []string{s.slotsKey(name)}, args...).Slice()
		if err == nil && (len(v) < 2 || (i64(v[0]) == 0 && (len(v)-2)%3 != 0)) {
			err = fmt.Errorf("the script returned %d values", len(v))
		}
		if err != nil {
			break
		}
		if i64(v[0]) == 1 {
			return int(i64(v[1])), true, 0, nil
		}
		wait = time.Duration(i64(v[1])) * time.Microsecond
		more := false
		for i := 2; i+2 < len(v); i += 3 {
			place, token, owner := str(v[i]), str(v[i+1]), str(v[i+2])
			if k := place + "\x00" + token; !seen[k] && idemstore.HolderGone(owner) {
				seen[k] = true
				gone = append(gone, place, token)
				more = true
			}
		}
		if !more {
			return 0, false, wait, nil
		}
	}
	if err != nil {
		return 0, false, 0, fmt.Errorf("redisstore: store %q: limit %q: acquire a slot: %w", s.name, name, err)
	}
	return 0, false, wait, nil
}

// RenewSlot implements [idemstore.LimitStore].
func (s *Store) RenewSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder, lease time.Duration) (held bool, err error) {
	n, err := renewSlotScript.Run(ctx, s.client, []string{s.slotsKey(name)}, strconv.Itoa(slot), h.Token, micros(lease)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: store %q: limit %q: renew slot %d: %w", s.name, name, slot, err)
	}
	return n == 1, nil
}

// ReleaseSlot implements [idemstore.LimitStore].
func (s *Store) ReleaseSlot(ctx context.Context, name string, slot int, h idemstore.SlotHolder) error {
	if err := releaseSlotScript.Run(ctx, s.client, []string{s.slotsKey(name)}, strconv.Itoa(slot), h.Token).Err(); err != nil {
		return fmt.Errorf("redisstore: store %q: limit %q: release slot %d: %w", s.name, name, slot, err)
	}
	return nil
}
