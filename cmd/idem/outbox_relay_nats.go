package main

import (
	"github.com/idemgo/idem/natsoutbox"
	"github.com/idemgo/idem/outbox"
)

// --to nats://HOST:PORT/?stream=NAME&subject_prefix=PREFIX: NATS
// JetStream (module natsoutbox).
func init() {
	relayTargets["nats"] = func(raw string) (outbox.Deliverer, func() error, error) {
		d, err := natsoutbox.FromURL(raw)
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}
}
