package idem

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"

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
// back into T as it was (no set field that JSON skips — `json:"-"` or
// unexported —, no interface holding a type JSON gives back as another;
// values of types that encode themselves, like time.Time, count as the same
// when they encode the same; a nil and an empty slice or map are the same): otherwise the attempt fails with an error matching
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
func RunValue[T any](ctx context.Context, key Key, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	if err := key.Validate(); err != nil {
		var zero T
		return zero, err
	}
	s, err := Default()
	if err != nil {
		var zero T
		return zero, err
	}
	return RunValueOn(ctx, s, key, fn, opts...)
}

// RunValueOn is [RunValue] on store s, with the protocol of [RunOn].
func RunValueOn[T any](ctx context.Context, s Store, key Key, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	if fn == nil {
		panic("idem: RunValue with a nil fn")
	}
	st, cfg := storeFor(s, callRun, opts)
	var res Result
	var got T
	cfg.result = &res
	err := execute(ctx, st, key, cfg, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		got = v
		return encodeValue[T](key, v)
	}, nil, nil)
	return valueOf(key, res, got, err)
}

// RunTxValue is [RunTx] for a job whose work has an answer, as in
// [RunValue]: fn's value is stored with the done mark in the transaction
// that commits fn's writes, so a crash leaves both or neither, and the next
// call computes it again with its writes.
func RunTxValue[T, Tx any](ctx context.Context, s TxStore[Tx], key Key, fn func(context.Context, Tx) (T, error), opts ...Option) (T, error) {
	if fn == nil {
		panic("idem: RunTxValue with a nil fn")
	}
	st, cfg := txStoreFor[Tx](s, callRunTx, opts)
	var res Result
	var got T
	cfg.result = &res
	err := runTx(ctx, st, key, func(ctx context.Context, tx Tx) ([]byte, error) {
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
	back, err := decodeValue[T](key, b)
	if err != nil {
		return nil, Permanent(err)
	}
	if path, ok := sameAsJSON(v, back); !ok {
		return nil, Permanent(fmt.Errorf("%w: %s: the value of type %T does not come back from JSON as it was (%s differs: a field JSON skips, an unexported field, or an interface holding another type); nothing was marked done",
			ErrValueEncoding, key, v, path))
	}
	return b, nil
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// sameAsJSON reports whether back, v decoded from its own JSON, is v as a
// later caller would see it; when it is not, path names the first place that
// differs. Values whose type encodes itself (json.Marshaler,
// encoding.TextMarshaler: time.Time, for one) are the same when they encode
// the same; a nil and an empty slice or map are the same; everything else
// compares by kind, unexported fields included (JSON drops them, so one that
// is set does not come back).
func sameAsJSON[T any](v, back T) (path string, ok bool) {
	a, b := reflect.New(reflect.TypeFor[T]()).Elem(), reflect.New(reflect.TypeFor[T]()).Elem()
	a.Set(reflect.ValueOf(&v).Elem())
	b.Set(reflect.ValueOf(&back).Elem())
	return sameValue(a, b, "the value")
}

func sameValue(a, b reflect.Value, path string) (string, bool) {
	if a.CanInterface() && a.CanAddr() {
		t := a.Type()
		if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
			reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
			ja, errA := json.Marshal(a.Addr().Interface())
			jb, errB := json.Marshal(b.Addr().Interface())
			return path, errA == nil && errB == nil && bytes.Equal(ja, jb)
		}
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return path, a.IsNil() == b.IsNil()
		}
		if a.Kind() == reflect.Interface && a.Elem().Type() != b.Elem().Type() {
			return path, false
		}
		if a.Kind() == reflect.Interface { // an interface's value is not addressable: copy it
			ea, eb := reflect.New(a.Elem().Type()).Elem(), reflect.New(b.Elem().Type()).Elem()
			ea.Set(a.Elem())
			eb.Set(b.Elem())
			return sameValue(ea, eb, path)
		}
		return sameValue(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			if p, ok := sameValue(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); !ok {
				return p, false
			}
		}
		return path, true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return path, false
		}
		for i := range a.Len() {
			if p, ok := sameValue(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return path, true
	case reflect.Map:
		if a.Len() != b.Len() {
			return path, false
		}
		for it := a.MapRange(); it.Next(); {
			eb := b.MapIndex(it.Key())
			if !eb.IsValid() {
				return fmt.Sprintf("%s[%v]", path, it.Key()), false
			}
			ca, cb := reflect.New(it.Value().Type()).Elem(), reflect.New(eb.Type()).Elem()
			ca.Set(it.Value())
			cb.Set(eb)
			if p, ok := sameValue(ca, cb, fmt.Sprintf("%s[%v]", path, it.Key())); !ok {
				return p, false
			}
		}
		return path, true
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return path, a.IsNil() == b.IsNil()
	case reflect.Bool:
		return path, a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return path, a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return path, a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return path, a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return path, a.Complex() == b.Complex()
	case reflect.String:
		return path, a.String() == b.String()
	}
	return path, false
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
