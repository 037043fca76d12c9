package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemgo/idem/idemstore"
)

// RunValue is [Run] for a job whose work has an answer that every trigger
// of the key must get: a settlement total, the URL of a report, the id an
// external system gave. fn returns the value with its error; the value is
// encoded as JSON and stored with the key's done mark, in the same write. A
// later call for the done key does not run fn: it returns the stored value,
// decoded into T (outcome AlreadyDone). It is named after sync.OnceValue:
// the value of a function that runs once.
//
// The value must encode to at most idemstore.MaxValue bytes, and decode
// back into T as it was stored (no field JSON drops, no interface that
// does not decode): otherwise the attempt fails with an error matching
// [ErrValueTooLarge] or [ErrValueEncoding], before anything is marked done,
// and the key is parked (a retry would compute the same value). A stored
// value that does not decode into the T of a later call (unknown fields
// included) is an error matching ErrValueEncoding, never a zero value.
//
// What a crash between fn and the done mark does to the value follows the
// mode: [AtLeastOnce] runs fn again and stores the value of that run;
// [AtMostOnce] leaves the key unknown, and once a person resolves it as done
// it has no value; [TwoPhase] marks it done when the downstream has it
// (Recovered), without a value. A done key without a stored value (done by
// Run, by Resolve, by such a recovery, or pruned) returns an error matching
// [ErrNoValue] and the zero T: the work is done, but its answer was not
// kept. Run and RunValue of one key agree on the key: use one of them for
// it. [Result].Value holds the stored bytes.
func RunValue[T any](ctx context.Context, key Key, fn func(context.Context) (T, error), opts ...RunOption) (T, error) {
	if err := key.Validate(); err != nil {
		var zero T
		return zero, err
	}
	s, err := Default()
	if err != nil {
		var zero T
		return zero, err
	}
	return RunValueWith(ctx, s, key, fn, opts...)
}

// RunValueWith is [RunValue] on store s, with the protocol of [RunWith].
func RunValueWith[T any](ctx context.Context, s Store, key Key, fn func(context.Context) (T, error), opts ...RunOption) (T, error) {
	if fn == nil {
		panic("idem: RunValue with a nil fn")
	}
	cfg := configure(s, opts, RunOption.applyRun)
	var res Result
	var got T
	cfg.result = &res
	err := execute(ctx, s, key, cfg, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		got = v
		return encodeValue[T](key, v)
	}, nil, nil)
	return valueOf(key, res, got, err)
}

// RunTxValueWith is [RunTxWith] for a job whose work has an answer, as in
// [RunValue]: fn's value is stored with the done mark in the transaction
// that commits fn's writes, so a crash leaves both or neither, and the next
// call computes it again with its writes.
func RunTxValueWith[T, Tx any](ctx context.Context, s idemstore.TxStore[Tx], key Key, fn func(context.Context, Tx) (T, error), opts ...RunTxOption) (T, error) {
	if fn == nil {
		panic("idem: RunTxValue with a nil fn")
	}
	cfg := configure(s, opts, RunTxOption.applyRunTx)
	var res Result
	var got T
	cfg.result = &res
	err := runTx(ctx, s, key, func(ctx context.Context, tx Tx) ([]byte, error) {
		var zero T
		got = zero // a transaction run again must not keep an earlier run's value
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		b, err := encodeValue[T](key, v)
		if err == nil {
			got = v
		}
		return b, err
	}, cfg)
	return valueOf(key, res, got, err)
}

// encodeValue is v as stored: JSON, checked to decode back into a T and to
// fit idemstore.MaxValue. Its errors are Permanent: the key is parked.
func encodeValue[T any](key Key, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("%w: %s: the value of type %T does not encode as JSON: %v", ErrValueEncoding, key, v, err))
	}
	if len(b) > idemstore.MaxValue {
		return nil, Permanent(fmt.Errorf("%w: %s: the value encodes to %d bytes, more than idemstore.MaxValue (%d); nothing was marked done",
			ErrValueTooLarge, key, len(b), idemstore.MaxValue))
	}
	if _, err := decodeValue[T](key, b); err != nil {
		return nil, Permanent(err)
	}
	return b, nil
}

// decodeValue is a stored value as a T. Unknown fields are an error.
func decodeValue[T any](key Key, b []byte) (T, error) {
	var v T
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %s: the stored value does not decode as %T: %v", ErrValueEncoding, key, v, err)
	}
	if d.More() {
		var zero T
		return zero, fmt.Errorf("%w: %s: the stored value has data after its JSON", ErrValueEncoding, key)
	}
	return v, nil
}

// valueOf is RunValue's answer for a call that ended with res and err; ran
// is the value fn returned, when the call ran it.
func valueOf[T any](key Key, res Result, ran T, err error) (T, error) {
	var zero T
	switch {
	case err != nil:
		return zero, err
	case res.Outcome == Ran:
		return ran, nil
	case len(res.Value) == 0:
		return zero, fmt.Errorf("%w: %s is done (%s), but no value was stored with its done mark", ErrNoValue, key, res.Outcome)
	}
	return decodeValue[T](key, res.Value)
}
